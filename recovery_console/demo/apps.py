from django.apps import AppConfig


class DemoConfig(AppConfig):
    """A tool beside the loop: runs the simulated cluster against it (``seed_demo``,
    ``run_demo``, ``run_simulator``)."""

    name = "recovery_console.demo"
    label = "demo"
    verbose_name = "Simulated cluster"
