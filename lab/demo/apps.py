from django.apps import AppConfig


class DemoConfig(AppConfig):
    """A tool beside the loop: runs the simulated cluster against it (``seed_demo``,
    ``run_demo``, ``run_simulator``)."""

    name = "lab.demo"
    label = "demo"
    verbose_name = "Simulated cluster"
