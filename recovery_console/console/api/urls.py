"""Routes of the console API under ``/api/v1/`` (the Advisor API has its own, under advisor/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from recovery_console.console.api import views

router = DefaultRouter(trailing_slash=True)
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("attempts", views.AttemptViewSet, basename="attempt")
router.register("anomalies", views.AnomalyViewSet, basename="anomaly")
router.register("advice", views.AdviceViewSet, basename="advice")
router.register("reviews", views.ReviewViewSet, basename="review")
router.register("mode-requests", views.ModeChangeRequestViewSet, basename="mode-request")
router.register("policy-requests", views.PolicyChangeRequestViewSet, basename="policy-request")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("telemetry-gaps", views.TelemetryGapViewSet, basename="telemetry-gap")
router.register("audit-entries", views.AuditEntryViewSet, basename="audit-entry")
router.register(
    "notification-channels", views.NotificationChannelViewSet, basename="notification-channel"
)

urlpatterns = [
    path("token/", views.TokenView.as_view(), name="api-token"),
    *router.urls,
]
