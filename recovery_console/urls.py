from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster"),
    path("clusters/<slug:name>/_workloads", views.cluster_workloads, name="cluster-workloads"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload"),
    path("workloads/<int:pk>/_attempts", views.workload_attempts, name="workload-attempts"),
    path("admin/", admin.site.urls),
    path("api/v1/advisor/", include("remediation.advisor.urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
