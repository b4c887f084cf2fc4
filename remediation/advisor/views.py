"""The Advisor API: what a Slurm Advisor Controller reads and reports (DESIGN.md §4).

Every endpoint is scoped to the cluster in the URL and to the controller token's cluster, and a
replayed request changes nothing twice."""

from typing import Any

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet import services as console
from fleet.core.bulk import cyclic_gc_paused
from fleet.core.scheduler import (
    ClusterSnapshot,
    JobRecord,
    JobState,
    NodeRecord,
    NodeState,
)
from remediation import reporters, services
from remediation.advisor import serializers as s
from remediation.advisor.snapshot_items import check_items
from remediation.models import Advice, ControllerToken

from .authentication import ControllerTokenAuthentication, IsController, IsControllerOfCluster


def controller_of(request: Request) -> ControllerToken:
    """The authenticated controller (``IsControllerOfCluster`` has checked it is one)."""
    token = request.auth
    if not isinstance(token, ControllerToken):
        # Unreachable behind IsControllerOfCluster; kept so a view wired without it fails closed.
        raise PermissionDenied("a controller token is required")
    return token


WITHDRAWN = "withdrawn"
REFUSALS = {
    409: OpenApiResponse(
        s.RefusalSerializer,
        description="a stale generation, another controller's claim, or (`code: withdrawn`) "
        "advice no longer to be enforced: take no further step for it",
    )
}


def withdrawn(exc: services.AdviceWithdrawn) -> Response:
    # Its own code, so a controller tells "stop here" apart from a lost race or a stale report.
    return Response({"detail": str(exc), "code": WITHDRAWN}, status=status.HTTP_409_CONFLICT)


class AdvisorView(APIView):
    # Controllers only: a person's session or API token must not drive the Advisor API.
    authentication_classes = (ControllerTokenAuthentication,)
    permission_classes = (IsControllerOfCluster,)


class SnapshotView(AdvisorView):
    @extend_schema(request=s.SnapshotSerializer, responses=s.SnapshotResultSerializer)
    def post(self, request: Request, cluster: str) -> Response:
        """The jobs and nodes the controller sees (squeue/sinfo), recorded as attempts and nodes.
        A job or node that does not fit is left out and listed in ``rejected``; the rest is
        recorded."""
        # Tens of thousands of jobs and nodes: see cyclic_gc_paused.
        with cyclic_gc_paused():
            payload = s.SnapshotEnvelopeSerializer(data=request.data)
            payload.is_valid(raise_exception=True)
            data = payload.validated_data
            own = controller_of(request).cluster.name
            jobs, bad_jobs = check_items(own, "job", data["jobs"], s.JobSerializer, _job)
            nodes, bad_nodes = check_items(own, "node", data["nodes"], s.NodeSerializer, _node)
            snapshot = ClusterSnapshot(
                taken_at=data["taken_at"],
                jobs=tuple(job for _, job in jobs),
                nodes=tuple(node for _, node in nodes),
            )
            # Under the controller's actor, so the audit trail says which controller saw it.
            result = console.record_snapshot(
                controller_of(request).actor,
                controller_of(request).cluster,
                snapshot,
                rejected=[*bad_jobs, *bad_nodes],
                positions=([n for n, _ in jobs], [n for n, _ in nodes]),
            )
        reporters.snapshot_reported(controller_of(request), snapshot.taken_at)
        return Response(s.SnapshotResultSerializer(result).data)


def _job(job: dict[str, Any]) -> JobRecord:
    return JobRecord(
        **job
        | {
            "state": JobState(job["state"]),
            "nodes": tuple(job["nodes"]),
            "excluded_nodes": tuple(job["excluded_nodes"]),
        }
    )


def _node(node: dict[str, Any]) -> NodeRecord:
    return NodeRecord(
        **node | {"state": NodeState(node["state"]), "partitions": tuple(node["partitions"])}
    )


class ActiveAdviceCursor(CursorPagination):
    """Oldest first by id: stable while advice is added or revised, so a controller following
    the cursor neither skips nor repeats one."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 250


class AdviceHistoryCursor(ActiveAdviceCursor):
    ordering = "-id"


class AdviceListView(AdvisorView):
    @extend_schema(
        parameters=[
            OpenApiParameter("active", bool, description="only advice still to act on (default)"),
            OpenApiParameter("limit", int, description="page size, 100 by default, at most 250"),
            OpenApiParameter("cursor", str, description="the position `next` links to"),
        ],
        responses=s.AdvicePageSerializer,
    )
    def get(self, request: Request, cluster: str) -> Response:
        """Advice with its generation, desired state and exclusions, a page at a time (follow
        ``next``); ``enforce: false`` (monitor mode, a partition outside the allowlist,
        withdrawn) must not be acted on."""
        # A plain dict: from a QueryDict DRF would read a missing boolean as false.
        query = s.AdviceQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        own = controller_of(request).cluster
        # Active by default: that is what a controller polls every cycle. History newest first.
        if query.validated_data["active"]:
            advice, paginator = services.active_advice(own), ActiveAdviceCursor()
        else:
            advice = Advice.objects.filter(cluster=own).select_related("attempt")
            paginator = AdviceHistoryCursor()
        page = paginator.paginate_queryset(advice, request, view=self)
        return paginator.get_paginated_response(s.AdviceSerializer(page, many=True).data)


class ReconciliationView(AdvisorView):
    @extend_schema(
        request=s.ReconciliationSerializer, responses={200: s.AdviceSerializer, **REFUSALS}
    )
    def put(self, request: Request, cluster: str, pk: int) -> Response:
        """Report on one advice for the generation acted on: pending (claims it), converged or
        abandoned. Idempotent; a stale generation or another controller's claim gets 409, and
        so does advice withdrawn since (``code: withdrawn``)."""
        payload = s.ReconciliationSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Scoped lookup first: another cluster's advice id gets 404, not a server error.
        get_object_or_404(Advice, pk=pk, cluster=controller_of(request).cluster)
        data = payload.validated_data
        try:
            result = services.reconcile(
                controller_of(request),
                pk,
                data["observed_generation"],
                data["disposition"],
                data["reason"],
            )
        except services.AdviceWithdrawn as exc:
            return withdrawn(exc)
        except services.StaleGeneration as exc:
            # 409, not 400: newer advice exists, and the controller re-reads it next cycle.
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except services.AdviceAlreadyClaimed:
            return Response(
                {"detail": "another controller claimed this advice"},
                status=status.HTTP_409_CONFLICT,
            )
        except PermissionError as exc:
            # Advice not to be enforced (monitor mode, outside the allowlist) is never acted on.
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        return Response(s.AdviceSerializer(result.advice).data)


class MilestoneView(AdvisorView):
    @extend_schema(
        request=s.MilestoneSerializer,
        responses={201: s.MilestoneSerializer, 200: s.MilestoneSerializer, **REFUSALS},
    )
    def post(self, request: Request, cluster: str) -> Response:
        """A step carried out; the idempotency key makes a replay record nothing (200). On
        advice withdrawn meanwhile the step is recorded and answered 409 ``code: withdrawn``:
        the controller takes no further step."""
        payload = s.MilestoneSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        get_object_or_404(Advice, pk=data["advice"], cluster=controller_of(request).cluster)
        try:
            _, created = services.record_milestone(
                controller_of(request),
                data["advice"],
                data["idempotency_key"],
                data["action"],
                data["at"],
                data["detail"],
            )
        except services.AdviceWithdrawn as exc:
            return withdrawn(exc)
        # 200 on a replay: a controller retrying after a lost answer sees success, not an error.
        return Response(
            payload.data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class NodeResumeView(AdvisorView):
    @extend_schema(responses=s.NodeResumeSerializer(many=True))
    def get(self, request: Request, cluster: str) -> Response:
        """Nodes released in the console that our drain took out of Slurm."""
        pending = services.pending_resumes(controller_of(request).cluster)
        return Response(s.NodeResumeSerializer(pending, many=True).data)

    @extend_schema(request=s.NodeResumeReportSerializer, responses={204: None})
    def post(self, request: Request, cluster: str) -> Response:
        """What the controller did about one (resumed it, or why not); replays change nothing."""
        payload = s.NodeResumeReportSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        services.record_resume(
            controller_of(request),
            data["node"],
            data["requested_at"],
            data["outcome"],
            data["detail"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class HeartbeatView(AdvisorView):
    @extend_schema(request=s.HeartbeatSerializer, responses=s.HeartbeatAnswerSerializer)
    def post(self, request: Request, cluster: str) -> Response:
        """A controller or watchdog is alive (shown on the cluster page, in the API and
        /metrics; silence is notified). The answer says whether anyone else reports Slurm's
        state, and the hold timeouts in force."""
        payload = s.HeartbeatSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        answer = reporters.heartbeat(controller_of(request), payload.to_info(), timezone.now())
        return Response(s.HeartbeatAnswerSerializer(answer).data)


class WhoAmIView(APIView):
    """Needs a controller token of any cluster: it is how a token's holder learns which."""

    authentication_classes = (ControllerTokenAuthentication,)
    permission_classes = (IsController,)

    @extend_schema(responses=s.WhoAmISerializer)
    def get(self, request: Request) -> Response:
        """The token's cluster and name, the cluster's mode and its hold timeouts: a controller
        or watchdog started with only the console's URL and a token reads these first."""
        return Response(s.WhoAmISerializer(reporters.whoami(controller_of(request))).data)
