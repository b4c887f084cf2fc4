"""``manage.py seed_demo``: the simulated ``demo`` cluster the embedded console shows."""

from typing import Any

from django.core.management.base import BaseCommand

from recovery_console import services
from recovery_console.models import Cluster

# A small cluster with a high fault rate, so a visitor sees interruptions within a minute;
# a simulated operator requeues failed work after a short while.
DEMO_SCHEDULER = {
    "backend": "simulated",
    "simulation": {
        "seed": 7,
        "nodes": 16,
        "workloads": 5,
        "nodes_per_job": [2, 4],
        "fault_rate": 3.0,
        "progress_interval_s": 5.0,
        "checkpoint_interval_s": 300.0,
        "manual_recovery": {"notice_s": 45.0, "act_s": 15.0},
    },
}


class Command(BaseCommand):
    help = "Create the simulated demo cluster (does nothing if it exists)."

    def handle(self, *args: Any, **options: Any) -> None:
        if Cluster.objects.filter(name="demo").exists():
            self.stdout.write("demo cluster already exists")
            return
        services.create_cluster(
            "system:seed_demo",
            "demo",
            scheduler=DEMO_SCHEDULER,
            telemetry={"logs": {"type": "simulated"}, "metrics": {"type": "simulated"}},
            partitions_allowlist=["canary"],
        )
        self.stdout.write("created the simulated demo cluster")
