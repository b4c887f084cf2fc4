"""Each fault writes its root cause on the implicated host and rank, cascades on the others, and
the scheduler's view agrees with the ground truth."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from detection.core.telemetry import LogLine
from fleet.core.scheduler import (
    TERMINAL_JOB_STATES,
    JobState,
    NodeRecord,
    NodeState,
)
from lab.simulator import (
    ENTRIES,
    FaultEntry,
    FaultKind,
    InjectedFault,
    SimulatedCluster,
)

from .support import advance_until, job, node, quiet_cluster, start_training, texts

# Where each fault's first evidence shows ("host": the implicated node's system log, "hosts":
# any node's system log, "job": the job's output) and a piece of its text.
ROOT_CAUSE: dict[str, tuple[tuple[str, str], ...]] = {
    "xid79_fallen_off_bus": (("host", ": 79, pid='<unknown>', name=<unknown>, GPU has fallen"),),
    "xid48_dbe": (("host", ": 48, pid="),),
    "xid94_contained_ecc": (("host", ": 94, pid="),),
    "xid95_uncontained_ecc": (("host", ": 95, pid="),),
    "xid64_row_remap_failure": (("host", ": 63, pid='<unknown>'"),),
    "xid120_gsp_error": (("host", ": 120, pid="),),
    "xid119_gsp_timeout": (("host", ": 119, pid="),),
    "cuda_unknown_error": (("job", "CUDA error: unknown error"),),
    "pcie_aer_fatal": (("host", "AER: Uncorrected (Fatal) error received: 0000:"),),
    "xid74_nvlink_crash": (("host", "NVLink: fatal error detected on link"),),
    "xid74_nvlink_hang": (("host", "NVLink: fatal error detected on link"),),
    "ib_completion_error": (("host", "Port: 1 Link DOWN"),),
    "roce_connection_reset": (("host", "Port: 1 Link DOWN"),),
    "ib_link_down_hang": (("host", "Port: 1 Link DOWN"),),
    "ib_link_degraded": (("host", "Port: 1 Link DOWN"),),
    "host_oom_killer": (("host", "Out of memory: Killed process"),),
    "soft_lockup_hang": (("host", "watchdog: BUG: soft lockup"),),
    "fabric_manager_down": (("host", "nvidia-fabricmanager.service: Main process exited"),),
    "node_crash": (("host", "Kernel panic - not syncing"), ("job", "Connection reset by peer")),
    "checkpoint_no_space": (("job", "OSError: [Errno 28] No space left on device"),),
    "stale_file_handle": (("job", "OSError: [Errno 116] Stale file handle"),),
    "lustre_io_error": (("host", "LustreError: 11-0: scratch-OST"),),
    "nfs_server_hang": (("hosts", "nfs: server nfs01 not responding"),),
    "c10d_store_failure": (("job", "[c10d] recvValue failed on SocketImpl"),),
    "cuda_oom": (("job", "CUDA out of memory. Tried to allocate"),),
    "nan_loss": (("job", "nan"),),
    "shape_mismatch": (("job", "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),),
    "config_key_error": (("job", "KeyError: 'rope_scaling'"),),
    "missing_module": (("job", "ModuleNotFoundError: No module named 'flash_attn'"),),
    "device_assert": (("job", "Assertion `srcIndex < srcSelectDimSize` failed."),),
    "admin_node_down": (("job", "DUE TO NODE FAILURE"),),
    "time_limit": (("job", "DUE TO TIME LIMIT"),),
    "preemption": (("job", "DUE TO PREEMPTION"),),
    "unexplained_sigkill": (("job", "Killed"),),
    "truncated_exit": (("job", " iteration"),),
}
SILENT = {"gpu_silent_hang", "gpu_thermal_throttle", "gpu_power_brake"}
# Shows only in the progress lines after it (see the divergence test below).
IN_PROGRESS = {"loss_divergence"}
CASCADES = (
    "ncclRemoteError",
    "Watchdog caught collective operation timeout",
    "Terminated",
    "SIGTERM",
    "ssh exited",
    "Killing subprocess",
    "Connection reset by peer",
)
END_STATE = {
    "node_crash": JobState.NODE_FAIL,
    "admin_node_down": JobState.NODE_FAIL,
    "host_oom_killer": JobState.OUT_OF_MEMORY,
    "time_limit": JobState.TIMEOUT,
    "preemption": JobState.PREEMPTED,
    # The run goes on with a loss that stays up, until someone stops it.
    "loss_divergence": JobState.RUNNING,
}


@dataclass
class Injected:
    """A fault injected on GPU 2 of the second node of a three-node job, 2000 s later."""

    sim: SimulatedCluster
    job_id: str
    host: str
    fault: InjectedFault
    lines: list[LogLine]


def _inject(key: str) -> Injected:
    sim = quiet_cluster(nodes=6, seed=sum(map(ord, key)), min_job_age_s=1e6)
    job_id = start_training(sim, nodes=3)
    host = job(sim, job_id).nodes[1]
    fault = sim.inject(job_id, key, host=host, gpu=2)
    return Injected(sim, job_id, host, fault, sim.advance(2000))


def test_every_catalogue_entry_has_an_expectation() -> None:
    assert {e.key for e in ENTRIES} == set(ROOT_CAUSE) | SILENT | IN_PROGRESS


@pytest.mark.parametrize("key", sorted(ROOT_CAUSE))
def test_the_root_cause_text_appears_where_it_belongs(key: str) -> None:
    case = _inject(key)
    found = [
        line
        for line in case.lines
        if any(
            needle in line.text and _from(line, where, case.job_id, case.host)
            for where, needle in ROOT_CAUSE[key]
        )
    ]
    assert found, f"no {ROOT_CAUSE[key]} in the logs"
    assert found[0].at == case.fault.at


def _from(line: LogLine, where: str, job_id: str, host: str) -> bool:
    if where == "host":
        return line.host == host
    if where == "hosts":
        return line.host is not None
    return line.job_id == job_id


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.key)
def test_ground_truth_matches_the_scheduler_view(entry: FaultEntry) -> None:
    case = _inject(entry.key)
    sim, job_id = case.sim, case.job_id
    assert sim.ground_truth[0] == case.fault
    assert case.fault.implicated_hosts == ((case.host,) if entry.blames_host else ())
    record = job(sim, job_id)
    if entry.kind is FaultKind.STRAGGLER:
        assert record.state is JobState.RUNNING
    elif entry.kind is FaultKind.CRASH:
        assert record.state is END_STATE.get(entry.key, JobState.FAILED)
        assert record.exit_code is not None or record.state is JobState.RUNNING
    else:
        assert record.state in (JobState.RUNNING, JobState.FAILED)  # silent, or the watchdog
        progress = sim.progress_of(job_id)
        sim.advance(300)
        assert sim.progress_of(job_id).iteration == progress.iteration


@pytest.mark.parametrize("key", [e.key for e in ENTRIES if e.script == "gpu_crash"])
def test_a_gpu_crash_names_the_failing_rank_and_cascades_to_the_others(key: str) -> None:
    case = _inject(key)
    rank = 1 * 8 + 2
    job_text = texts(case.lines, case.job_id)
    culprit = [t for t in job_text if "CUDA error" in t]
    assert culprit
    markers = (f"[rank{rank}]", f"{rank}: ", f"{case.host}: ", f"Rank {rank}]")
    assert all(any(m in line for m in markers) for line in culprit)
    assert any(any(c in t for c in CASCADES) for t in job_text)


def test_a_node_crash_gives_node_fail_a_down_node_and_no_metrics() -> None:
    sim = quiet_cluster(nodes=6)
    job_id = start_training(sim, nodes=3)
    host = job(sim, job_id).nodes[2]
    sim.inject(job_id, "node_crash", host=host)
    assert all(sample.host != host for sample in sim.gpu_metrics())
    advance_until(sim, lambda: job(sim, job_id).state in TERMINAL_JOB_STATES, step_s=1)
    assert job(sim, job_id).state is JobState.NODE_FAIL
    assert job(sim, job_id).reason == "NodeDown"
    assert node(sim, host) == NodeRecord(host, NodeState.DOWN, "Not responding", 8, ("gpu",))
    advance_until(sim, lambda: node(sim, host).state is NodeState.IDLE, limit_s=4000)


def test_a_gpu_that_fell_off_the_bus_breaks_the_next_job_on_that_node_too() -> None:
    sim = quiet_cluster(nodes=3)
    job_id = start_training(sim, nodes=3)
    host = job(sim, job_id).nodes[0]
    sim.inject(job_id, "xid79_fallen_off_bus", host=host, gpu=5)
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED)
    sim.scheduler.requeue_hold(job_id)
    sim.scheduler.release(job_id)
    advance_until(sim, lambda: len(sim.ground_truth) == 2)
    again = sim.ground_truth[1]
    assert (again.entry, again.implicated_hosts, again.attempt) == (
        "xid79_fallen_off_bus",
        (host,),
        1,
    )


def test_a_persistent_application_error_comes_back_after_a_restart() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.inject(job_id, "missing_module")
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED)
    sim.scheduler.requeue_hold(job_id)
    sim.scheduler.release(job_id)
    advance_until(sim, lambda: len(sim.ground_truth) == 2)
    assert sim.ground_truth[1].entry == "missing_module"


def test_a_straggler_lowers_the_logged_throughput() -> None:
    sim = quiet_cluster(nodes=4)
    job_id = start_training(sim, nodes=2)
    before = _throughputs(sim.advance(600), job_id)
    sim.inject(job_id, "gpu_thermal_throttle", host=job(sim, job_id).nodes[1])
    after = _throughputs(sim.advance(600), job_id)
    assert before and after
    assert max(after) < min(before) * 0.75


def _throughputs(lines: list[LogLine], job_id: str) -> list[float]:
    found = (re.search(r"TFLOP/s/GPU\): ([\d.]+)", t) for t in texts(lines, job_id))
    return [float(m.group(1)) for m in found if m]


def test_a_divergence_shows_as_a_loss_that_jumps_and_stays_up() -> None:
    sim = quiet_cluster(nodes=6, seed=7, min_job_age_s=1e6)
    job_id = start_training(sim, nodes=3)
    pattern = re.compile(r"(?:lm loss: |'loss': |\bloss: )([0-9.E+-]+)")

    def losses(lines: list[LogLine]) -> list[float]:
        found = (pattern.search(line.text) for line in lines if line.job_id == job_id)
        return [float(match.group(1)) for match in found if match]

    before = losses(sim.advance(600))
    sim.inject(job_id, "loss_divergence")
    after = losses(sim.advance(2000))
    assert before and len(after) >= 5
    assert min(after) >= 1.5 * before[-1]
    assert job(sim, job_id).state is JobState.RUNNING
