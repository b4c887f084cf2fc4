from django.apps import AppConfig


class RecoveryConsoleConfig(AppConfig):
    name = "recovery_console"
    verbose_name = "Recovery Console"
