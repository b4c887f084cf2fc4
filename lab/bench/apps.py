from django.apps import AppConfig


class BenchConfig(AppConfig):
    """A tool beside the loop: ``manage.py bench``."""

    name = "lab.bench"
    label = "bench"
    verbose_name = "Benchmark"
