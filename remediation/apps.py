from django.apps import AppConfig


class RemediationConfig(AppConfig):
    """Floor 3: attribution, policy, isolation, advice and the controllers' API."""

    name = "remediation"

    def ready(self) -> None:
        from fleet.models import register_cluster_check

        from .services import policy_problems

        register_cluster_check(policy_problems)
