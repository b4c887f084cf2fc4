"""DCGM-exporter gauges, computed on demand as one scrape of every node would return them.

Values come from each GPU's situation (idle, starting, training, throttled, stuck, failing) plus
a little noise. The noise is a hash of the seed, the GPU, the metric and the second, so a scrape
never draws from a random stream and scraping more or less often changes nothing else.
"""

from __future__ import annotations

from datetime import datetime

from detection.core.telemetry import DCGM_METRICS, MetricSample

from .state import Node, Phase, Run
from .textgen import pci_bus

# The gauges below are listed in this order.
METRICS = DCGM_METRICS

# Bits of DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (NVML's clocks-throttle reasons).
GPU_IDLE = 0x1
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80

# (util %, SM active ratio, SM clock MHz, power W, temp C, throttle bits) per situation.
Gauges = tuple[float, float, float, float, float, int]
_IDLE: Gauges = (0.0, 0.0, 345.0, 70.0, 33.0, GPU_IDLE)
_STARTING: Gauges = (12.0, 0.05, 1980.0, 180.0, 45.0, 0)
_BUSY: Gauges = (98.0, 0.84, 1980.0, 655.0, 68.0, 0)
_WAITING: Gauges = (1.0, 0.01, 1980.0, 120.0, 48.0, 0)
_STUCK: Gauges = (100.0, 0.98, 1980.0, 310.0, 58.0, 0)
_THERMAL: Gauges = (96.0, 0.47, 1140.0, 410.0, 90.0, SW_THERMAL | HW_THERMAL)
_POWER: Gauges = (95.0, 0.38, 870.0, 330.0, 66.0, HW_SLOWDOWN | HW_POWER_BRAKE)
_MASK = (1 << 64) - 1


def _unit(*parts: int) -> float:
    """A deterministic number in [-1, 1) from integers (splitmix64 mixing)."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = ((x ^ part) * 0xBF58476D1CE4E5B9) & _MASK
        x ^= x >> 31
        x = (x * 0x94D049BB133111EB) & _MASK
        x ^= x >> 29
    return x / 2.0**63 - 1.0


def scrape(nodes: list[Node], at: datetime, t: float, seed: int) -> list[MetricSample]:
    """Every series of every reachable node; a node that is offline has no exporter."""
    samples: list[MetricSample] = []
    second = int(t)
    for node in nodes:
        if node.offline:
            continue
        job = node.job
        job_id = job.job_id if job is not None else None
        run = job.run if job is not None and not node.completing else None
        pos = run.nodes.index(node) if run is not None and run.alive else -1
        fb_mib = job.workload.fb_mib if job is not None and pos >= 0 else 0.0
        for gpu in range(node.gpus):
            situation = _situation(node, gpu, run, pos)
            values = _values(situation, node, gpu, fb_mib, (seed, node.index, gpu, second))
            # dcgm-exporter's pci_bus_id label, the address the driver's Xid lines print.
            pci = f"0000{pci_bus(gpu).upper()}.0"
            samples.extend(
                MetricSample(at, node.name, gpu, name, value, job_id, pci)
                for name, value in zip(METRICS, values, strict=True)
            )
    return samples


def _values(
    situation: Gauges, node: Node, gpu: int, fb_mib: float, key: tuple[int, int, int, int]
) -> tuple[float, ...]:
    util, sm, clock, power, temp, bits = situation
    noise = [_unit(*key, i) for i in range(5)]
    busy = util > 50
    if situation is _STARTING:
        fb_mib *= 0.6
    return (
        float(round(max(0.0, min(100.0, util + (2.0 * noise[0] if busy else 0.0))))),
        round(max(0.0, min(1.0, sm + (0.03 * noise[1] if sm > 0 else 0.0))), 3),
        float(round(clock - (15.0 * abs(noise[2]) if busy else 0.0))),
        round(power + 12.0 * noise[3], 1),
        float(round(temp + 2.0 * noise[4])),
        float(round(fb_mib + (300.0 * noise[4] if fb_mib else 0.0))),
        float(bits),
        float(node.xid[gpu]),
        float(node.dbe[gpu]),
    )


def _situation(node: Node, gpu: int, run: Run | None, pos: int) -> Gauges:
    if run is None or pos < 0:
        return _IDLE
    defect = node.defect
    if defect is not None and defect.entry.xid == 79 and defect.gpu == gpu:
        return _WAITING  # the GPU fell off the bus: nothing runs on it any more
    if run.phase is Phase.STARTUP:
        return _STARTING
    if run.phase is Phase.HUNG:
        return _STUCK if run.stuck == (pos, gpu) else _WAITING
    if run.phase is not Phase.TRAIN:
        return _WAITING
    if defect is not None and defect.entry.detail == "thermal":
        return _THERMAL
    if defect is not None and defect.entry.detail == "power":
        return _POWER
    if run.slow > 1.0:
        # Everyone else waits for the straggler at each collective.
        util, sm, clock, power, temp, bits = _BUSY
        return (util / run.slow, sm / run.slow, clock, power / run.slow, temp - 4.0, bits)
    return _BUSY
