from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("clusters/<slug:name>/", views.cluster_detail, name="cluster"),
    path("clusters/<slug:name>/_workloads", views.cluster_workloads, name="cluster-workloads"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload"),
    path("workloads/<int:pk>/_attempts", views.workload_attempts, name="workload-attempts"),
    path("admin/", admin.site.urls),
]
