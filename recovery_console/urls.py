from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from recovery_console.console.exporter import metrics_view

from .console import views
from .console.forms import LoginForm

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters/new/", views.cluster_new, name="cluster-new"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster"),
    path(
        "clusters/<slug:name>/registration/",
        views.cluster_registration,
        name="cluster-registration",
    ),
    path("clusters/<slug:name>/check", views.cluster_check, name="cluster-check"),
    path("clusters/<slug:name>/_workloads", views.cluster_workloads, name="cluster-workloads"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload"),
    path("workloads/<int:pk>/_attempts", views.workload_attempts, name="workload-attempts"),
    path("workloads/<int:pk>/_timeline", views.workload_timeline, name="workload-timeline"),
    path("workloads/", views.workload_list, name="workloads"),
    path("clusters/<slug:name>/_card", views.cluster_card, name="cluster-card"),
    path("clusters/<slug:name>/_reporters", views.cluster_reporters, name="cluster-reporters"),
    path("clusters/<slug:name>/nodes/", views.node_list, name="nodes"),
    path("clusters/<slug:name>/nodes/_table", views.node_table, name="nodes-table"),
    path(
        "clusters/<slug:name>/nodes/<str:node>/release", views.release, name="console-node-release"
    ),
    path("clusters/<slug:name>/settings/", views.cluster_settings, name="cluster-settings"),
    path(
        "clusters/<slug:name>/settings/rule-edit",
        views.ask_rule_edit,
        name="cluster-rule-edit",
    ),
    path("clusters/<slug:name>/mode/", views.mode_page, name="mode"),
    path("clusters/<slug:name>/mode/_status", views.mode_status, name="mode-status"),
    path("clusters/<slug:name>/mode/request", views.request_action, name="mode-request"),
    path("clusters/<slug:name>/mode/<int:pk>/approve", views.approve, name="mode-approve"),
    path("clusters/<slug:name>/mode/<int:pk>/reject", views.reject, name="mode-reject"),
    path("clusters/<slug:name>/mode/monitor", views.back_to_monitor, name="mode-monitor"),
    path(
        "clusters/<slug:name>/policy/<int:pk>/approve", views.approve_policy, name="policy-approve"
    ),
    path("clusters/<slug:name>/policy/<int:pk>/reject", views.reject_policy, name="policy-reject"),
    path("anomalies/<int:pk>/", views.anomaly_detail, name="anomaly"),
    path("reviews/", views.review_queue, name="review-queue"),
    path("reviews/_queue", views.review_queue_items, name="review-queue-items"),
    path("reviews/_agreement", views.agreement_chart, name="agreement-chart"),
    path("reviews/advice/<int:pk>/label", views.label, name="label-advice"),
    path("audit/", views.audit_trail, name="audit"),
    path("audit/_chain", views.chain_status, name="audit-chain"),
    path("signals/", views.test_signals, name="test-signals"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, next_page="overview", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/advisor/", include("remediation.advisor.urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("recovery_console.console.api.urls")),
    path("metrics", metrics_view, name="metrics"),
]

handler400 = "recovery_console.console.views.errors.bad_request"
handler404 = "recovery_console.console.views.errors.not_found"
handler500 = "recovery_console.console.views.errors.server_error"
