"""Clusters: registration, settings, the check, agreement, precision, reporters, losses and the
mode workflow's verbs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as ModelValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from detection import costs
from fleet.models import Cluster
from recovery_console.console import approval, policy_approval, registration, reviews
from recovery_console.console import rule_proposals as proposals
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.models import PolicyChangeRequest
from recovery_console.console.roles import ADMIN, OPERATOR
from remediation import reporters
from remediation.checkup import check_cluster
from remediation.core.checkup import worst

from .common import (
    PENDING_APPROVAL,
    REFUSED,
    Conflict,
    ReadOnlyViewSet,
    model_refusals_as_400,
    refusal,
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
        "ask_rule_edit": OPERATOR,
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
    # Plain lists, not pages: a cluster has a handful of reporters.
    @action(detail=True, methods=["get"], pagination_class=None)
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

    @extend_schema(responses=s.RuleProposalSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="rule-proposals", pagination_class=None)
    def rule_proposals(self, request: Request, name: str) -> Response:
        """Rule-table edits that reviewers' corrections in the approval window propose, each
        with the labels behind it and the agreement the cluster would have had with it."""
        found = proposals.rule_proposals(self.get_object())
        data = [{**asdict(p), "summary": p.summary} for p in found]
        return Response(s.RuleProposalSerializer(data, many=True).data)

    @extend_schema(
        request=s.RuleEditSerializer,
        responses={202: s.PolicyChangeRequestSerializer, 400: OpenApiResponse(), **REFUSED},
    )
    @action(detail=True, methods=["post"], url_path="rule-proposals/ask")
    def ask_rule_edit(self, request: Request, name: str) -> Response:
        """Ask for a proposed rule (operator): a settings change that a second person with the
        approver role approves on the mode page (or ``policy-requests/{id}/approve``)."""
        payload = s.RuleEditSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            asked = proposals.ask_for_rule_edit(
                request.user, self.get_object(), **payload.validated_data
            )
        except ModelValidationError as exc:
            return Response(exc.message_dict, status=status.HTTP_400_BAD_REQUEST)
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        data = s.PolicyChangeRequestSerializer(asked).data
        return Response(data, status=status.HTTP_202_ACCEPTED)


@contextmanager
def _registration_refusals() -> Iterator[None]:
    """The registration's refusals as DRF's: 400 by field, 403 for a missing role, 409 when
    the workflow refuses (a change already waiting for approval)."""
    try:
        with model_refusals_as_400():
            yield
    except registration.ClusterExists as exc:
        raise ValidationError({"name": [str(exc)]}) from None
    except reviews.RoleMissing as exc:
        raise PermissionDenied(exc.reason) from None
    except reviews.ApprovalRefused as exc:
        raise Conflict(exc.reason) from None
