"""The console's REST API (``/api/v1/``): read-only viewsets, and verbs that call services.

Every endpoint checks a role (``console.roles``): reading needs ``viewer``; each verb names the
role it needs in ``verb_roles``. Lists hold only the rows of clusters where the person is a
viewer (another cluster's row is a 404), and a verb needs its role on the row's own cluster.
Refusals by the approval workflow answer 409 with the reason, a missing role 403, invalid input
400.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from detection import costs
from detection.models import Anomaly, TelemetryGap
from fleet import audit
from fleet.models import Attempt, AuditEntry, Cluster, Node, Workload
from recovery_console.console import approval, policy_approval, registration, reviews
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.models import (
    ModeChangeRequest,
    NotificationChannel,
    PersonalToken,
    PolicyChangeRequest,
    Review,
)
from recovery_console.console.notifications import channels
from recovery_console.console.roles import (
    ADMIN,
    APPROVER,
    OPERATOR,
    REVIEWER,
    VIEWER,
    HasRole,
    visible,
)
from remediation import reporters
from remediation import services as remediation
from remediation.checkup import check_cluster
from remediation.core.checkup import worst
from remediation.models import Advice, NodeHealth

from .pagination import AuditCursor, Cursor
from .renderers import CSVRenderer, csv_rows
from .tokens import revoke_token, rotate_token

REFUSED = {
    403: OpenApiResponse(description="the role this needs is missing"),
    409: OpenApiResponse(description="the workflow refused the step; `detail` says why"),
}


def refusal(exc: reviews.ApprovalRefused) -> Response:
    # RoleMissing is an ApprovalRefused too: tell it apart first, it is a 403 and not a 409.
    code = status.HTTP_403_FORBIDDEN if isinstance(exc, reviews.RoleMissing) else 409
    return Response({"detail": exc.reason}, status=code)


class RoleViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Reading needs the viewer role; a verb needs the role ``verb_roles`` names for it."""

    verb_roles: ClassVar[dict[str, str]] = {}
    # The path from a row to its cluster, which decides who sees the row.
    cluster_field: ClassVar[str] = "cluster"
    pagination_class = Cursor

    def get_permissions(self) -> list[BasePermission]:
        # Actions not named, and requests routed to no action at all, need only the viewer role.
        return [HasRole(self.verb_roles.get(self.action or "", VIEWER))()]

    def get_queryset(self) -> QuerySet[Any]:
        return visible(super().get_queryset(), self.request.user, VIEWER, self.cluster_field)


class ReadOnlyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleViewSet):
    pass


# A settings change that waits for a second person.
PENDING_APPROVAL = OpenApiResponse(
    s.PolicyChangeRequestSerializer,
    description="not applied yet: a second person with the approver role must approve the "
    "request (it touches the approval gate, or the cluster acts)",
)


class ClusterViewSet(ReadOnlyViewSet):
    """Clusters: their mode, policy, allowlist and connections."""

    queryset = Cluster.objects.all()
    cluster_field = "pk"
    serializer_class = s.ClusterSerializer
    filterset_class = f.ClusterFilterSet
    # Addressed by name, as in the console's own URLs.
    lookup_field = "name"
    verb_roles: ClassVar = {
        "create": ADMIN,
        "update": ADMIN,
        "partial_update": OPERATOR,
        "check": OPERATOR,
        "request_action_mode": OPERATOR,
        "return_to_monitor": OPERATOR,
    }

    @extend_schema(
        request=s.ClusterRegistrationSerializer,
        responses={
            201: s.ClusterSerializer,
            400: OpenApiResponse(description="the problems, by field"),
            **REFUSED,
        },
    )
    def create(self, request: Request) -> Response:
        """Register a cluster (admin). It starts in monitor mode; every document is validated
        and a refusal lists every problem by field; the registration is audited."""
        data = self._registration(request)
        name = data.pop("name")
        data.pop("note", None)
        with _registration_refusals():
            outcome = registration.create(request.user, name, data)
        return Response(s.ClusterSerializer(outcome.cluster).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.ClusterRegistrationSerializer,
        responses={
            200: s.ClusterSerializer,
            202: PENDING_APPROVAL,
            400: OpenApiResponse(description="the problems, by field"),
            **REFUSED,
        },
    )
    def update(self, request: Request, name: str) -> Response:
        """Change a cluster's registration (admin): the documents given replace the cluster's,
        the others stay; the same registration again changes and audits nothing."""
        data = self._registration(request)
        if data.pop("name") != name:
            raise ValidationError({"name": ["a cluster is not renamed: its name keys its history"]})
        note = data.pop("note", "")
        with _registration_refusals():
            outcome = registration.change(request.user, self.get_object(), data, note)
        if outcome.pending is not None:
            data = s.PolicyChangeRequestSerializer(outcome.pending).data
            return Response(data, status=status.HTTP_202_ACCEPTED)
        return Response(s.ClusterSerializer(outcome.cluster).data)

    @extend_schema(request=None, responses={200: s.CheckSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def check(self, request: Request, name: str) -> Response:
        """What ``manage.py check_cluster`` reports (operator): each source and the scheduler
        read once, now, and a finding per stage. Nothing is written."""
        findings = check_cluster(self.get_object(), datetime.now(UTC))
        data = {"status": worst(findings), "findings": [asdict(f) for f in findings]}
        return Response(s.CheckSerializer(data).data)

    def _registration(self, request: Request) -> dict[str, Any]:
        payload = s.ClusterRegistrationSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        return dict(payload.validated_data)

    @extend_schema(
        request=s.ClusterSettingsSerializer,
        responses={
            200: s.ClusterSerializer,
            202: PENDING_APPROVAL,
            400: OpenApiResponse(description="the problems"),
            **REFUSED,
        },
    )
    def partial_update(self, request: Request, name: str) -> Response:
        """Change the policy, partition allowlist or connections (operator). Each document is
        validated; a refusal lists every problem. A change of the approval gate, or of the
        policy or allowlist in action mode, waits for a second person's approval (202). The
        mode is changed by the workflow only."""
        payload = s.ClusterSettingsSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = dict(payload.validated_data)
        note = data.pop("note", "")
        try:
            result = policy_approval.change_cluster_settings(
                request.user, self.get_object(), data, note
            )
        # Django's ValidationError is not DRF's: give it the same 400 shape by hand.
        except ModelValidationError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        if isinstance(result, PolicyChangeRequest):
            return Response(
                s.PolicyChangeRequestSerializer(result).data, status=status.HTTP_202_ACCEPTED
            )
        return Response(s.ClusterSerializer(result).data)

    @extend_schema(responses=s.AgreementSerializer)
    @action(detail=True, methods=["get"])
    def agreement(self, request: Request, name: str) -> Response:
        """How often reviewers agreed with the advice in the policy's window, per day too."""
        cluster = self.get_object()
        measured = reviews.agreement(cluster)
        by_day = reviews.agreement_by_day(cluster, days=measured.window_days)
        data = {
            **measured.__dict__,
            "shortfall": measured.shortfall,
            "by_day": [{"day": d, "agreed": a, "labelled": n} for d, a, n in by_day],
        }
        return Response(s.AgreementSerializer(data).data)

    @extend_schema(responses=s.PrecisionSerializer)
    @action(detail=True, methods=["get"])
    def precision(self, request: Request, name: str) -> Response:
        """Per category, action and rule: how often reviewers agreed with the advice in the
        policy's window (which rules can be trusted in action mode)."""
        cluster = self.get_object()
        rows = [{**row.__dict__, "precision": row.precision} for row in reviews.precision(cluster)]
        window = reviews.agreement(cluster).window_days
        return Response(s.PrecisionSerializer({"window_days": window, "rows": rows}).data)

    @extend_schema(responses=s.ReporterHealthSerializer(many=True))
    @action(detail=True, methods=["get"])
    def reporters(self, request: Request, name: str) -> Response:
        """The cluster's controllers and watchdogs: role, status (ok, failing, silent, unused),
        last heartbeat and its age, when the Slurm state each last reported was taken,
        version, transport and the last error each reported."""
        rows = [h.as_json() for h in reporters.health([self.get_object()], timezone.now())]
        return Response(s.ReporterHealthSerializer(rows, many=True).data)

    @extend_schema(responses=s.ClusterLossesSerializer)
    @action(detail=True, methods=["get"])
    def losses(self, request: Request, name: str) -> Response:
        """GPU-hours lost to interruptions over the cluster's workloads: idle (held without
        progress, or waiting for the next attempt) and recomputed since the last checkpoint."""
        cluster = self.get_object()
        lost = costs.cluster_gpu_hours_lost(cluster)
        data = {
            "cluster": cluster.name,
            "gpu_hours_lost": {"idle": lost.idle, "recompute": lost.recompute, "total": lost.total},
        }
        return Response(s.ClusterLossesSerializer(data).data)

    @extend_schema(
        request=s.NoteSerializer, responses={201: s.ModeChangeRequestSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"], url_path="request-action-mode")
    def request_action_mode(self, request: Request, name: str) -> Response:
        """Ask for action mode (operator); the request records the agreement measured now."""
        payload = s.NoteSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            made = approval.request_action_mode(
                request.user, self.get_object(), payload.validated_data["note"]
            )
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.ModeChangeRequestSerializer(made).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=s.OptionalReasonSerializer, responses={200: s.ClusterSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"], url_path="return-to-monitor")
    def return_to_monitor(self, request: Request, name: str) -> Response:
        """Back to monitor mode, at once (operator)."""
        payload = s.OptionalReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Nothing to catch: going back is never refused to an operator (see ``verb_roles``).
        cluster = approval.back_to_monitor(
            request.user, self.get_object(), payload.validated_data["reason"]
        )
        return Response(s.ClusterSerializer(cluster).data)


@contextmanager
def _registration_refusals() -> Iterator[None]:
    """The registration's refusals as DRF's: 400 by field, 403 for a missing role, 409 when
    the workflow refuses (a change already waiting for approval)."""
    try:
        with _as_400():
            yield
    except registration.ClusterExists as exc:
        raise ValidationError({"name": [str(exc)]}) from None
    except reviews.RoleMissing as exc:
        raise PermissionDenied(exc.reason) from None
    except reviews.ApprovalRefused as exc:
        raise Conflict(exc.reason) from None


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the workflow refused the step"


class WorkloadViewSet(ReadOnlyViewSet):
    """Workloads: logical training runs, each made of attempts."""

    queryset = Workload.objects.select_related("cluster")
    serializer_class = s.WorkloadSerializer
    filterset_class = f.WorkloadFilterSet


class AttemptViewSet(ReadOnlyViewSet):
    """Attempts: one Slurm job, or one requeue of it. History: never rewritten."""

    queryset = Attempt.objects.select_related("cluster", "monitor")
    serializer_class = s.AttemptSerializer
    filterset_class = f.AttemptFilterSet


class AnomalyViewSet(ReadOnlyViewSet):
    """Anomalies: detected crashes, hangs and stragglers, with evidence and attribution."""

    queryset = Anomaly.objects.select_related("cluster")
    serializer_class = s.AnomalySerializer
    filterset_class = f.AnomalyFilterSet


class TelemetryGapViewSet(ReadOnlyViewSet):
    """Telemetry gaps: when a source was unreachable, silent or late, and for how many running
    jobs hang and slowdown verdicts waited on it."""

    queryset = TelemetryGap.objects.select_related("cluster")
    serializer_class = s.TelemetryGapSerializer
    filterset_class = f.TelemetryGapFilterSet


class AdviceViewSet(ReadOnlyViewSet):
    """Advice: what the policy recommends for each anomaly, and how far it got."""

    queryset = Advice.objects.select_related("cluster")
    serializer_class = s.AdviceSerializer
    filterset_class = f.AdviceFilterSet
    verb_roles: ClassVar = {"label": REVIEWER}

    @extend_schema(request=s.LabelSerializer, responses={200: s.ReviewSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def label(self, request: Request, pk: str) -> Response:
        """Label the advice (reviewer): agree, or disagree with the action you would have
        taken. Labelling again replaces your label."""
        payload = s.LabelSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            review = reviews.label_advice(request.user, self.get_object(), **payload.validated_data)
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        # The service's contradictions (agreeing yet preferring another action) are input errors.
        except ValueError as exc:
            return Response({"preferred_action": [str(exc)]}, status=400)
        return Response(s.ReviewSerializer(review).data)


class ReviewViewSet(ReadOnlyViewSet):
    """Reviewers' labels on advice."""

    queryset = Review.objects.select_related("reviewer", "advice")
    cluster_field = "advice__cluster"
    serializer_class = s.ReviewSerializer
    filterset_class = f.ReviewFilterSet


class ModeChangeRequestViewSet(ReadOnlyViewSet):
    """Requests to switch a cluster to action mode, and their decisions."""

    queryset = ModeChangeRequest.objects.select_related("cluster", "requested_by", "decided_by")
    serializer_class = s.ModeChangeRequestSerializer
    filterset_class = f.ModeChangeRequestFilterSet
    # Rejecting is also open to the requester (withdrawing): the service checks who.
    verb_roles: ClassVar = {"approve": APPROVER}

    @extend_schema(request=None, responses={200: s.ModeChangeRequestSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve (approver, not the requester), while the agreement measured now meets the
        policy; the cluster then switches to action mode."""
        try:
            decided = approval.approve_mode_request(request.user, self.get_object())
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.ModeChangeRequestSerializer(decided).data)

    @extend_schema(
        request=s.ReasonSerializer, responses={200: s.ModeChangeRequestSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject (approver) or withdraw (the requester), saying why."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            decided = approval.reject_mode_request(
                request.user, self.get_object(), payload.validated_data["reason"]
            )
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.ModeChangeRequestSerializer(decided).data)


class PolicyChangeRequestViewSet(ReadOnlyViewSet):
    """Settings changes waiting for (or decided by) a second person: those that touch the
    approval gate, or the policy or allowlist of a cluster in action mode."""

    queryset = PolicyChangeRequest.objects.select_related("cluster", "requested_by", "decided_by")
    serializer_class = s.PolicyChangeRequestSerializer
    filterset_class = f.PolicyChangeRequestFilterSet
    verb_roles: ClassVar = {"approve": APPROVER}

    @extend_schema(request=None, responses={200: s.PolicyChangeRequestSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve and apply (approver, not the requester), while the settings it changes are
        as they were when asked."""
        try:
            decided = policy_approval.approve_policy_request(request.user, self.get_object())
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.PolicyChangeRequestSerializer(decided).data)

    @extend_schema(
        request=s.ReasonSerializer, responses={200: s.PolicyChangeRequestSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject (approver) or withdraw (the requester), saying why."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            decided = policy_approval.reject_policy_request(
                request.user, self.get_object(), payload.validated_data["reason"]
            )
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.PolicyChangeRequestSerializer(decided).data)


class NodeViewSet(ReadOnlyViewSet):
    """Nodes as the scheduler reports them, with their strikes and drain state."""

    queryset = Node.objects.select_related("cluster")
    serializer_class = s.NodeSerializer
    filterset_class = f.NodeFilterSet
    verb_roles: ClassVar = {"release": OPERATOR}

    @extend_schema(
        request=s.ReasonSerializer,
        responses={200: s.NodeSerializer, 403: REFUSED[403], 404: OpenApiResponse()},
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Return a drained or suspect node to service (operator), with a reason."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        node = self.get_object()
        # A node that never had a strike has nothing to release: 404, as the web page answers.
        get_object_or_404(NodeHealth, cluster=node.cluster, name=node.name)
        remediation.release_node(
            reviews.actor_of(request.user),
            node.cluster,
            node.name,
            payload.validated_data["reason"],
        )
        # Serialized after the release, so the health shown is the new one.
        return Response(s.NodeSerializer(node).data)


@extend_schema_view(
    list=extend_schema(
        description=(
            "The audit trail, newest first. With `format=csv` (or `Accept: text/csv`) the "
            "filtered trail streams as CSV from the cursor on, without pages."
        ),
        responses={
            (200, "application/json"): s.AuditEntrySerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
)
class AuditEntryViewSet(ReadOnlyViewSet):
    """The append-only, hash-chained audit trail."""

    queryset = AuditEntry.objects.select_related("cluster")
    serializer_class = s.AuditEntrySerializer
    filterset_class = f.AuditEntryFilterSet
    # Paged by the gapless sequence, the trail's own order, rather than by id.
    pagination_class = AuditCursor
    renderer_classes = (JSONRenderer, BrowsableAPIRenderer, CSVRenderer)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if request.accepted_renderer.format != "csv":
            return super().list(request, *args, **kwargs)
        entries = self.filter_queryset(self.get_queryset())
        response = StreamingHttpResponse(
            csv_rows(s.AUDIT_CSV_COLUMNS, self._rows_from_cursor(entries)),
            content_type="text/csv; charset=utf-8",
        )
        response["Content-Disposition"] = 'attachment; filename="audit-trail.csv"'
        return response

    def _rows_from_cursor(self, entries: QuerySet[AuditEntry]) -> Iterator[dict[str, Any]]:
        # A cursor from the JSON pages is honoured: an export can go on where a page left off.
        cursor = AuditCursor().decode_cursor(self.request)
        if cursor is not None and cursor.position is not None:
            position = int(cursor.position)
            entries = entries.filter(
                # A reversed cursor (a previous page) points at newer entries, a forward one older.
                **{"sequence__gt" if cursor.reverse else "sequence__lt": position}
            )
        # Keyset batches: constant memory however long the trail.
        last = None
        while True:
            batch = entries.order_by("-sequence")
            if last is not None:
                batch = batch.filter(sequence__lt=last)
            rows = list(batch[:1000])
            yield from (s.AuditEntrySerializer(e).data for e in rows)
            if len(rows) < 1000:
                return
            last = rows[-1].sequence

    @extend_schema(responses=s.ChainStatusSerializer)
    @action(detail=False, methods=["get"])
    def chain(self, request: Request) -> Response:
        """Verify the hash chain and name the first broken entry, if any."""
        report = audit.verify_chain()
        # ``intact`` is a property, not a field, so it is added by hand.
        data = {**report.__dict__, "intact": report.intact}
        return Response(s.ChainStatusSerializer(data).data)


class NotificationChannelViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, ReadOnlyViewSet
):
    """Where a cluster's notifications go (webhooks and email); managed by admins."""

    queryset = NotificationChannel.objects.select_related("cluster")
    serializer_class = s.NotificationChannelSerializer
    filterset_class = f.NotificationChannelFilterSet
    verb_roles: ClassVar = {
        "create": ADMIN,
        "update": ADMIN,
        "partial_update": ADMIN,
        "destroy": ADMIN,
    }

    def perform_create(self, serializer: Any) -> None:
        # The service saves and audits; setting ``instance`` lets the response show what it stored.
        with _as_400():
            serializer.instance = channels.add_channel(
                self.request.user, **serializer.validated_data
            )

    def perform_update(self, serializer: Any) -> None:
        with _as_400():
            serializer.instance = channels.change_channel(
                self.request.user, serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: NotificationChannel) -> None:
        channels.remove_channel(self.request.user, instance)


@contextmanager
def _as_400() -> Iterator[None]:
    """A model's refusal (Django's ValidationError) as DRF's: a 400 naming each field."""
    try:
        yield
    except ModelValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        raise ValidationError(detail) from exc


class TokenView(APIView):
    """Your personal API token, for REST clients: ``Authorization: Token <key>``."""

    # Any logged-in person, role or not: a token only ever carries its owner's roles.
    permission_classes = (IsAuthenticated,)

    @extend_schema(responses=s.TokenStatusSerializer)
    def get(self, request: Request) -> Response:
        """Whether you have a token, and since when. The key is only shown when issued."""
        user: Any = request.user
        token = PersonalToken.objects.filter(user=user).first()
        data = {"exists": token is not None, "created": token.created if token else None}
        return Response(s.TokenStatusSerializer(data).data)

    @extend_schema(request=None, responses={201: s.TokenSerializer})
    def post(self, request: Request) -> Response:
        """Create your token, or rotate it: the previous key stops working at once."""
        token = rotate_token(request.user)  # the key is shown this once
        data = s.TokenSerializer({"key": token.key, "created": token.created}).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        """Revoke your token."""
        revoke_token(request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
