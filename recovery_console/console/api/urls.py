"""Routes of the console API under ``/api/v1/`` (the Advisor API has its own, under advisor/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from recovery_console.console.api.views import (
    advice,
    approvals,
    audit,
    clusters,
    nodes,
    notifications,
    token,
    workloads,
)

router = DefaultRouter(trailing_slash=True)
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("workloads", workloads.WorkloadViewSet, basename="workload")
router.register("attempts", workloads.AttemptViewSet, basename="attempt")
router.register("anomalies", workloads.AnomalyViewSet, basename="anomaly")
router.register("advice", advice.AdviceViewSet, basename="advice")
router.register("reviews", advice.ReviewViewSet, basename="review")
router.register("mode-requests", approvals.ModeChangeRequestViewSet, basename="mode-request")
router.register("policy-requests", approvals.PolicyChangeRequestViewSet, basename="policy-request")
router.register("nodes", nodes.NodeViewSet, basename="node")
router.register("telemetry-gaps", workloads.TelemetryGapViewSet, basename="telemetry-gap")
router.register("audit-entries", audit.AuditEntryViewSet, basename="audit-entry")
router.register(
    "notification-channels",
    notifications.NotificationChannelViewSet,
    basename="notification-channel",
)

urlpatterns = [
    path("token/", token.TokenView.as_view(), name="api-token"),
    *router.urls,
]
