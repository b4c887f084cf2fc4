from django.urls import path

from remediation.advisor import views

urlpatterns = [
    # One segment, so no cluster name can take its place.
    path("self", views.WhoAmIView.as_view(), name="advisor-self"),
    path("<slug:cluster>/snapshots", views.SnapshotView.as_view(), name="advisor-snapshots"),
    path("<slug:cluster>/advice", views.AdviceListView.as_view(), name="advisor-advice"),
    path(
        "<slug:cluster>/advice/<int:pk>/reconciliation",
        views.ReconciliationView.as_view(),
        name="advisor-reconciliation",
    ),
    path("<slug:cluster>/milestones", views.MilestoneView.as_view(), name="advisor-milestones"),
    path("<slug:cluster>/node-resumes", views.NodeResumeView.as_view(), name="advisor-resumes"),
    path("<slug:cluster>/heartbeat", views.HeartbeatView.as_view(), name="advisor-heartbeat"),
]
