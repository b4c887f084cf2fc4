from django.apps import AppConfig


class DetectionConfig(AppConfig):
    """Floor 2: telemetry sources, signatures, detectors and anomalies."""

    name = "detection"

    def ready(self) -> None:
        from fleet.models import register_cluster_check

        from .services import telemetry_problems

        register_cluster_check(telemetry_problems)
