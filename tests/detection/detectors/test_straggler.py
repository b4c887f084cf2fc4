from dataclasses import replace
from datetime import UTC, datetime, timedelta

from detection.core.detectors.straggler import (
    StragglerSettings,
    ThroughputHistory,
    check_straggler,
    outlier_nodes,
    throttled_nodes,
)
from detection.core.scrape import GpuReadings, read_by_host
from detection.core.telemetry import MetricSample

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = StragglerSettings(baseline_samples=20, window_samples=5, drop_fraction=0.2)
NODES = [f"gpu-node-{i:03d}" for i in range(1, 7)]


def history(values: list[float]) -> ThroughputHistory:
    h = ThroughputHistory()
    for n, value in enumerate(values):
        h = h.add(T0 + timedelta(seconds=30 * n), value, SETTINGS)
    return h


def readings(samples: list[MetricSample]) -> GpuReadings:
    """A scrape's samples as the scan hands them to a job's detectors: by GPU."""
    return read_by_host(samples).gpus_of({sample.host for sample in samples})


def gpu_metrics(slow: str | None = None) -> GpuReadings:
    samples = []
    for i, host in enumerate(NODES):
        for gpu in range(8):
            clock = 1410.0 - (i % 3) * 5 - gpu
            power = 650.0 + (i % 2) * 10
            throttle = 0.0
            if host == slow and gpu == 3:
                clock, power, throttle = 900.0, 380.0, float(0x20)
            samples += [
                MetricSample(T0, host, gpu, "DCGM_FI_DEV_SM_CLOCK", clock),
                MetricSample(T0, host, gpu, "DCGM_FI_DEV_POWER_USAGE", power),
                MetricSample(T0, host, gpu, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", throttle),
            ]
    return readings(samples)


def test_a_sustained_drop_with_one_throttled_node_names_that_node() -> None:
    h = history([180.0 + (n % 3) for n in range(20)] + [120.0, 118.0, 121.0, 119.0, 122.0])
    finding = check_straggler("7", h, gpu_metrics(slow="gpu-node-004"), NODES, SETTINGS)
    assert finding is not None
    assert finding.hosts == ("gpu-node-004",)
    assert finding.kind == "straggler" and "34%" in finding.summary
    assert finding.attribution == "hardware"  # its own GPUs report the slowdown
    assert "thermal/power slowdown (reasons 0x20)" in finding.evidence[1].text


def test_a_drop_shared_by_every_node_names_none() -> None:
    h = history([100.0] * 20 + [60.0] * 5)
    finding = check_straggler("7", h, gpu_metrics(), NODES, SETTINGS)
    assert finding is not None and finding.hosts == () and finding.root_cause == "straggler:job"
    assert finding.attribution == "none"


def test_a_single_slow_report_is_not_sustained() -> None:
    h = history([100.0] * 20 + [100.0, 100.0, 50.0, 100.0, 99.0])
    assert check_straggler("7", h, gpu_metrics(slow="gpu-node-004"), NODES, SETTINGS) is None


def test_too_little_history_says_nothing() -> None:
    assert check_straggler("7", history([100.0, 50.0, 50.0]), {}, NODES, SETTINGS) is None


def test_healthy_nodes_with_small_differences_are_not_outliers() -> None:
    assert outlier_nodes(gpu_metrics(), NODES, SETTINGS) == {}


def test_a_whole_throttled_node_of_a_two_node_job_is_named_by_its_throttle_reasons() -> None:
    two = NODES[:2]
    samples = []
    for host in two:
        slow = host == two[0]
        for gpu in range(8):
            samples += [
                MetricSample(T0, host, gpu, "DCGM_FI_DEV_SM_CLOCK", 1130.0 if slow else 1980.0),
                MetricSample(
                    T0, host, gpu, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 96.0 if slow else 0.0
                ),
            ]
    assert list(outlier_nodes(readings(samples), two, SETTINGS)) == [two[0]]


def test_throttle_bits_at_full_clock_do_not_name_a_node() -> None:
    samples = [
        MetricSample(T0, host, 0, name, value)
        for host in NODES[:2]
        for name, value in (
            ("DCGM_FI_DEV_SM_CLOCK", 1980.0),
            ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 32.0),
        )
    ]
    assert outlier_nodes(readings(samples), NODES[:2], SETTINGS) == {}


def watched(throttled_for: list[bool], slow: str = "gpu-node-004") -> ThroughputHistory:
    """A job slow from its start (no drop to see), scraped every 30 s."""
    h = history([120.0] * 25)
    for n, throttled in enumerate(throttled_for):
        gpus = gpu_metrics(slow=slow if throttled else None)
        h = h.note_throttled(T0 + timedelta(seconds=30 * n), throttled_nodes(gpus, NODES))
    return h


def test_a_node_throttled_from_the_start_is_a_straggler_once_it_stays_throttled() -> None:
    h = watched([True] * 5)  # 120 s of throttling by the fifth scrape
    finding = check_straggler("7", h, {}, NODES, SETTINGS, now=T0 + timedelta(seconds=120))
    assert finding is not None
    assert (finding.hosts, finding.node_local, finding.signature) == (
        ("gpu-node-004",),
        True,
        "gpu_throttled",
    )
    assert finding.attribution == "hardware"
    assert "reasons 0x20" in finding.evidence[0].text


def test_throttling_that_does_not_last_is_no_straggler() -> None:
    h = watched([True, True, False, True, True])  # it stopped: the clock starts again
    assert check_straggler("7", h, {}, NODES, SETTINGS, now=T0 + timedelta(seconds=120)) is None
    assert (
        check_straggler("7", watched([True] * 3), {}, NODES, SETTINGS, T0 + timedelta(seconds=60))
        is None
    )


def test_a_restart_slow_from_its_first_step_drops_against_the_previous_attempt() -> None:
    slow_from_the_start = [70.0] * 10
    own_only = history(slow_from_the_start)
    assert check_straggler("7", own_only, gpu_metrics(), NODES, SETTINGS) is None
    after_a_faster_attempt = replace(own_only, prior=100.0)
    finding = check_straggler("7", after_a_faster_attempt, gpu_metrics(), NODES, SETTINGS)
    assert finding is not None and "30%" in finding.summary


def test_the_first_reports_of_a_restart_are_warm_up_not_a_drop() -> None:
    warming_up = replace(history([40.0, 60.0, 90.0, 100.0, 100.0]), prior=100.0)
    assert check_straggler("7", warming_up, gpu_metrics(), NODES, SETTINGS) is None
    up_to_speed = replace(history([40.0, 60.0, 90.0, *[100.0] * 7]), prior=100.0)
    assert check_straggler("7", up_to_speed, gpu_metrics(), NODES, SETTINGS) is None


def event_after(report: int) -> datetime:
    """A node-local event just after the ``report``-th report (0-based; -1: before the first)."""
    return T0 + timedelta(seconds=30 * report + 10)


def test_a_slowdown_since_a_node_event_counts_with_one_report_before_it() -> None:
    # One report at full speed, then a link flap and every report since is 28% slower: too
    # little history for a baseline window, but the event says when the job slowed.
    h = history([430.0] + [309.0, 311.0, 307.0, 310.0, 308.0, 306.0])
    assert check_straggler("7", h, gpu_metrics(), NODES, SETTINGS) is None
    finding = check_straggler("7", h, gpu_metrics(), NODES, SETTINGS, node_event_at=event_after(0))
    assert finding is not None and "28%" in finding.summary
    # Dated from the first slow report; the scan puts it on the event's node.
    assert finding.first_evidence_at == T0 + timedelta(seconds=30)
    assert finding.hosts == () and finding.attribution == "none"


def test_a_node_event_the_job_kept_its_speed_through_is_no_slowdown() -> None:
    h = history([100.0, 101.0, 99.0, 100.0, 102.0, 100.0, 98.0])
    assert (
        check_straggler("7", h, gpu_metrics(), NODES, SETTINGS, node_event_at=event_after(1))
        is None
    )


def test_too_few_reports_since_a_node_event_are_not_yet_a_slowdown() -> None:
    h = history([430.0, 309.0, 311.0, 307.0])
    assert (
        check_straggler("7", h, gpu_metrics(), NODES, SETTINGS, node_event_at=event_after(0))
        is None
    )


def test_one_fast_report_since_a_node_event_means_it_did_not_slow_the_job() -> None:
    h = history([430.0, 309.0, 311.0, 428.0, 310.0, 308.0, 306.0])
    assert (
        check_straggler("7", h, gpu_metrics(), NODES, SETTINGS, node_event_at=event_after(0))
        is None
    )


def test_a_node_event_in_start_up_counts_only_against_the_previous_attempt() -> None:
    slow_from_the_start = history([70.0] * 6)
    before_the_first_step = event_after(-1)
    assert (
        check_straggler(
            "7",
            slow_from_the_start,
            gpu_metrics(),
            NODES,
            SETTINGS,
            node_event_at=before_the_first_step,
        )
        is None
    )
    after_a_faster_attempt = replace(slow_from_the_start, prior=100.0)
    finding = check_straggler(
        "7",
        after_a_faster_attempt,
        gpu_metrics(),
        NODES,
        SETTINGS,
        node_event_at=before_the_first_step,
    )
    assert finding is not None and "30%" in finding.summary


def test_a_throttled_gpu_still_names_its_node_in_a_slowdown_dated_by_a_node_event() -> None:
    h = history([430.0] + [300.0] * 6)
    finding = check_straggler(
        "7", h, gpu_metrics(slow="gpu-node-004"), NODES, SETTINGS, node_event_at=event_after(0)
    )
    assert finding is not None and finding.hosts == ("gpu-node-004",)
    assert finding.attribution == "hardware"
