"""The Advisor as a controller inside the console's own process sees it: the same services the
Advisor API calls, without HTTP. The simulated cluster's controller (demo, benchmark) uses it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from fleet import services as console
from fleet.core.scheduler import ClusterSnapshot
from remediation import reporters, services
from remediation.advisor.serializers import AdviceSerializer, NodeResumeSerializer
from remediation.controller.reconciler import AdviceItem, AdviceWithdrawn, NodeResume

from .models import ControllerToken


class LocalAdvisor:
    def __init__(self, token: ControllerToken) -> None:
        self.token = token

    def post_snapshot(self, snapshot: ClusterSnapshot) -> None:
        console.record_snapshot(self.token.actor, self.token.cluster, snapshot)
        reporters.snapshot_reported(self.token, snapshot.taken_at)

    def active_advice(self) -> list[AdviceItem]:
        # Through the API's own serializer, so an in-process controller sees what an HTTP one does.
        published = AdviceSerializer(services.active_advice(self.token.cluster), many=True).data
        return [AdviceItem.from_json(dict(item)) for item in published]

    def reconcile(self, advice: AdviceItem, disposition: str, reason: str = "") -> bool:
        try:
            services.reconcile(self.token, advice.id, advice.generation, disposition, reason)
        except (services.StaleGeneration, services.AdviceAlreadyClaimed):
            return False
        except services.AdviceWithdrawn as exc:
            raise AdviceWithdrawn(str(exc)) from exc
        return True

    def milestone(
        self, advice: AdviceItem, step: str, at: datetime, detail: dict[str, Any], key: str
    ) -> None:
        try:
            services.record_milestone(self.token, advice.id, key, step, at, detail)
        except services.AdviceWithdrawn as exc:
            raise AdviceWithdrawn(str(exc)) from exc

    def heartbeat(self, info: dict[str, Any]) -> dict[str, Any]:
        return reporters.heartbeat(self.token, info, timezone.now())

    def node_resumes(self) -> list[NodeResume]:
        published = NodeResumeSerializer(services.pending_resumes(self.token.cluster), many=True)
        return [NodeResume.from_json(dict(item)) for item in published.data]

    def report_resume(self, item: NodeResume, outcome: str, detail: str) -> None:
        at = datetime.fromisoformat(item.requested_at)
        services.record_resume(self.token, item.node, at, outcome, detail)


def controller_token_for(cluster: Any, name: str = "local") -> ControllerToken:
    """The token an in-process controller acts under (created on first use, audited)."""
    # Reused across restarts, rather than a new token (and audit entry) on every start.
    tokens = ControllerToken.objects.filter(cluster=cluster, name=name, revoked_at__isnull=True)
    token = tokens.first()
    return token or services.issue_controller_token("system:controller", cluster, name).token
