"""The loop that keeps simulated clusters running: step each simulator, scan it, advise, and let
its controller act (only on advice enforced in action mode)."""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections

from detection.scan import scan_cluster
from fleet.models import Cluster
from remediation.controller.reconciler import Controller
from remediation.services import advise_cluster

from .runner import SimulationRunner

log = logging.getLogger(__name__)


class SimulationLoop:
    """Every ``interval`` wall seconds, advances each simulated cluster by ``interval × speed``
    and runs one detection scan at the simulator's time. ``stop`` ends it after the step in
    hand, so SIGTERM never leaves half a step written."""

    def __init__(self, clusters: list[Cluster], interval: float = 2.0, speed: float = 1.0) -> None:
        self.runners = [SimulationRunner(cluster) for cluster in clusters]
        self.controllers = [runner.controller() for runner in self.runners]
        self.interval, self.speed = interval, speed
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            for runner, controller in zip(self.runners, self.controllers, strict=True):
                self._step(runner, controller)
            # Waiting on the event rather than sleeping lets ``stop`` wake the loop at once.
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def _step(self, runner: SimulationRunner, controller: Controller) -> None:
        # A long-lived thread must drop connections the database has since closed.
        close_old_connections()
        try:
            runner.step(self.interval * self.speed)
            summary = scan_cluster(runner.cluster, runner.now)
            advised = advise_cluster(runner.cluster, runner.now)
            acted = controller.cycle()
            log.debug("%s: %s; %d advice; %s", runner.cluster.name, summary, advised, acted)
        except Exception:  # the demo keeps going; the error is logged with its traceback
            log.exception("simulation step of %s failed", runner.cluster.name)

    def stop(self) -> None:
        self.stopping.set()


def simulated_clusters(names: list[str] | None = None) -> list[Cluster]:
    clusters = [c for c in Cluster.objects.all() if c.backend == "simulated"]
    return [c for c in clusters if not names or c.name in names]
