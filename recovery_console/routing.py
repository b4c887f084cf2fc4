from django.urls import path

from recovery_console.console.consumers import ClusterConsumer, WorkloadConsumer

websocket_urlpatterns = [
    path("ws/clusters/<int:pk>/", ClusterConsumer.as_asgi()),
    path("ws/workloads/<int:pk>/", WorkloadConsumer.as_asgi()),
]
