from datetime import UTC, datetime

from detection.core.detectors.gpu_faults import detect_metric_faults, read_scrape
from detection.core.telemetry import MetricSample

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def scrape(
    xid: dict[tuple[str, int], int] | None = None, dbe: float = 0.0, hosts=("n1", "n2"), gpus=2
):
    samples = []
    for host in hosts:
        for gpu in range(gpus):
            job = "77" if host == "n1" else None
            code = (xid or {}).get((host, gpu), 0)
            samples.append(MetricSample(T0, host, gpu, "DCGM_FI_DEV_XID_ERRORS", code, job))
            samples.append(MetricSample(T0, host, gpu, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", dbe, job))
    return read_scrape(samples)


def test_a_new_fatal_xid_code_implicates_its_node() -> None:
    (finding,) = detect_metric_faults(scrape(), scrape({("n1", 1): 79}), T0)
    assert (finding.category, finding.hosts, finding.job_id) == ("gpu_hardware", ("n1",), "77")
    assert finding.root_cause == "xid:79:n1"
    assert "Xid 79" in finding.summary


def test_the_same_last_code_on_the_next_scrape_is_not_a_new_fault() -> None:
    first = scrape({("n1", 1): 79})
    assert detect_metric_faults(first, scrape({("n1", 1): 79}), T0) == []


def test_an_application_xid_does_not_implicate_the_node() -> None:
    assert detect_metric_faults(scrape(), scrape({("n1", 0): 13}), T0) == []
    assert detect_metric_faults(scrape(), scrape({("n1", 0): 31}), T0) == []


def test_double_bit_ecc_increments_are_hardware_faults() -> None:
    (finding,) = detect_metric_faults(
        scrape(dbe=0), scrape(dbe=0) | {"n1/0": {"job": "77", "dbe": 2.0, "xid": 0}}, T0
    )
    assert finding.root_cause == "ecc-dbe:n1" and finding.category == "gpu_hardware"


def test_without_an_earlier_scrape_old_counters_are_not_replayed() -> None:
    assert detect_metric_faults({}, scrape(dbe=5), T0) == []


def test_one_gpu_vanishing_from_a_reporting_node_is_a_gpu_fault() -> None:
    current = scrape()
    del current["n1/1"]
    (finding,) = detect_metric_faults(scrape(), current, T0)
    assert (finding.root_cause, finding.job_id) == ("gpu-gone:n1", "77")


def test_a_whole_node_vanishing_is_a_node_failure() -> None:
    (finding,) = detect_metric_faults(scrape(), scrape(hosts=("n2",)), T0)
    assert (finding.category, finding.hosts) == ("node_or_process_failure", ("n1",))


def test_idle_gpus_vanishing_mean_nothing() -> None:
    assert detect_metric_faults(scrape(), scrape(hosts=("n1",)), T0) == []
