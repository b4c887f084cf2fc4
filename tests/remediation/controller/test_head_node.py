"""The controller and the watchdog as a Slurm head node runs them: separate processes started with
only the console's URL and a token file, no ``DATABASE_URL`` and no installed package (Django
cannot even be imported in them), against a live console over HTTP and the real local Slurm
cluster.

- Both heartbeat with their role; the watchdog stays a standby while the controller reports
  Slurm's state, and reports it itself once the controller is gone.
- Fail-open that keeps what is known: the controller is killed right after ``scontrol
  requeuehold``; the watchdog applies the advice's exclusion, then releases the job, which
  restarts on other nodes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from detection.scan import scan_cluster
from fleet import services as console
from fleet.models import Attempt, ClusterMode
from remediation import services
from remediation.models import Advice, ControllerToken, Milestone

from .lab import ROOT, SlurmLab, wait_for
from .test_end_to_end import FAILING_ON_NODE2

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# The head node has Python and the source tree only: -S leaves out every installed package
# (Django, DRF, Celery ...), so an import of one fails the process.
HEAD_NODE_PYTHON = [sys.executable, "-S", "-m", "remediation.controller"]
HOLD_TIMEOUT_S = 10  # the policy's smallest
# Stands in for scontrol in the controller's PATH: on the step after requeuehold (the exclusion,
# or a release) it kills the controller outright, as a crash or an OOM kill would.
DIES_AFTER_REQUEUEHOLD = """#!/bin/bash
case " $* " in
  *" ExcNodeList="*|" release "*) kill -KILL "$PPID"; exit 137 ;;
esac
exec {scontrol} "$@"
"""


class HeadNode:
    """Starts controller and watchdog processes the way an operator would on a head node."""

    def __init__(self, url: str, lab: SlurmLab, workdir: Path) -> None:
        self.url, self.lab, self.workdir = url, lab, workdir
        self.processes: list[subprocess.Popen[str]] = []

    def token_file(self, cluster, name: str) -> Path:
        path = self.workdir / f"token-{name}"
        path.write_text(services.issue_controller_token("user:alice", cluster, name).secret + "\n")
        path.chmod(0o600)
        return path

    def start(
        self, role: str, token: Path, *options: str, path_prefix: Path | None = None
    ) -> subprocess.Popen[str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        }
        env["PYTHONPATH"] = str(ROOT)
        if path_prefix is not None:
            env["PATH"] = f"{path_prefix}:{env['PATH']}"
        argv = [*HEAD_NODE_PYTHON, role, "--url", self.url]
        argv += ["--token-file", str(token), "--slurm-conf", str(self.lab.slurm_conf)]
        argv += ["--interval", "1", *options]
        log = (self.workdir / f"{role}-{len(self.processes)}.log").open("w")
        process = subprocess.Popen(
            argv, cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
        )
        self.processes.append(process)
        return process

    def log_of(self, process: subprocess.Popen[str]) -> str:
        index = self.processes.index(process)
        role = process.args[len(HEAD_NODE_PYTHON)]  # type: ignore[index]
        return (self.workdir / f"{role}-{index}.log").read_text()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@pytest.fixture
def head_node(slurm_lab: SlurmLab, live_server, tmp_path: Path) -> Iterator[HeadNode]:
    slurm_lab.reset()
    node = HeadNode(live_server.url, slurm_lab, tmp_path)
    yield node
    node.stop_all()
    slurm_lab.reset()


def lab_cluster(slurm_lab: SlurmLab, mode: str = ClusterMode.MONITOR):
    cluster = console.create_cluster(
        "user:alice",
        "lab",
        telemetry={
            "logs": {"type": "files", "path": str(slurm_lab.jobs_dir)},
            "metrics": {"type": "none"},
        },
        scheduler={"backend": "slurm"},
        # Four nodes: the default breaker (10% of the cluster) would refuse to exclude any.
        policy={"circuit_breaker_max_share": 0.5, "hold_timeout_seconds": HOLD_TIMEOUT_S},
    )
    cluster.mode = mode
    cluster.save()
    return cluster


def token(name: str) -> ControllerToken:
    return ControllerToken.objects.get(name=name)


def attempt_state(job_id: str, index: int = 0) -> str | None:
    attempt = Attempt.objects.filter(job_id=job_id, attempt_index=index).first()
    return None if attempt is None else attempt.state


def running(process: subprocess.Popen[str], head_node: HeadNode) -> Callable[[], bool]:
    def check() -> bool:
        assert process.poll() is None, head_node.log_of(process)
        return True

    return check


def test_controller_and_watchdog_run_with_only_the_url_and_a_token(
    head_node: HeadNode, slurm_lab: SlurmLab
) -> None:
    cluster = lab_cluster(slurm_lab)
    controller = head_node.start("controller", head_node.token_file(cluster, "head-controller"))
    job_id = slurm_lab.submit_job(nodes=1, sleep=300)

    def seen_running() -> bool:
        running(controller, head_node)()
        beating = token("head-controller").last_heartbeat_at is not None
        return beating and attempt_state(job_id) == "RUNNING"

    wait_for(seen_running, 30, "the controller to report the running job")
    assert token("head-controller").heartbeat["role"] == "controller"
    assert token("head-controller").last_snapshot_at is not None

    watchdog = head_node.start(
        "watchdog", head_node.token_file(cluster, "head-watchdog"), "--standby-after", "4"
    )
    wait_for(lambda: token("head-watchdog").last_heartbeat_at, 30, "the watchdog's heartbeat")
    time.sleep(3)  # a few cycles: the controller's snapshots are fresh, the watchdog stands by
    assert token("head-watchdog").heartbeat["role"] == "watchdog"
    assert token("head-watchdog").last_snapshot_at is None, head_node.log_of(watchdog)

    controller.send_signal(signal.SIGTERM)
    assert controller.wait(timeout=15) == 0, head_node.log_of(controller)
    slurm_lab.run("scancel", job_id)
    # Only the watchdog reports now: the console still sees what happens in Slurm.
    wait_for(lambda: attempt_state(job_id) == "CANCELLED", 30, "the cancel, seen by the watchdog")
    wait_for(lambda: token("head-watchdog").last_snapshot_at, 5, "the watchdog's snapshot time")
    # No token issued behind the operator's back: only the two they issued.
    assert sorted(ControllerToken.objects.values_list("name", flat=True)) == [
        "head-controller",
        "head-watchdog",
    ]
    assert "Traceback" not in head_node.log_of(watchdog)


def test_the_watchdog_applies_the_exclusion_when_the_controller_dies_after_requeuehold(
    head_node: HeadNode, slurm_lab: SlurmLab, own_partition: str, tmp_path: Path
) -> None:
    cluster = lab_cluster(slurm_lab, ClusterMode.ACTION)
    # Earlier tests' failed jobs are still in Slurm's queue: only this test's are acted on.
    cluster.partitions_allowlist = [own_partition]
    cluster.save()
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    scontrol = wrapper / "scontrol"
    scontrol.write_text(DIES_AFTER_REQUEUEHOLD.format(scontrol=shutil.which("scontrol")))
    scontrol.chmod(0o755)
    controller = head_node.start(
        "controller", head_node.token_file(cluster, "head-controller"), path_prefix=wrapper
    )
    watchdog = head_node.start(
        "watchdog", head_node.token_file(cluster, "head-watchdog"), "--standby-after", "3"
    )
    job_id = slurm_lab.sbatch(
        FAILING_ON_NODE2,
        "-N",
        "2",
        "-p",
        own_partition,
        "--comment",
        '{"workload": "llama-fail-open"}',
    )

    def restarted() -> bool:
        assert watchdog.poll() is None, head_node.log_of(watchdog)
        scan_cluster(cluster, datetime.now(UTC))
        services.advise_cluster(cluster, datetime.now(UTC))
        return attempt_state(job_id, 1) == "RUNNING"

    wait_for(restarted, 120, "the job to restart after the watchdog's release", step=0.5)
    assert controller.wait(timeout=5) == -signal.SIGKILL, head_node.log_of(controller)
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    assert (advice.action, advice.exclude_nodes) == ("restart_excluding_node", ["node2"])
    steps = Milestone.objects.filter(advice=advice).order_by("id")
    assert [(m.action, m.controller.rsplit("/", 1)[-1]) for m in steps] == [
        ("requeue_hold", "head-controller"),
        ("update_exclusions", "head-watchdog"),
        ("release", "head-watchdog"),
    ]
    assert steps[2].detail["held_for_s"] >= HOLD_TIMEOUT_S  # rounded to 0.1 s
    second = Attempt.objects.get(job_id=job_id, attempt_index=1)
    assert "node2" not in second.nodes and second.excluded_nodes == ["node2"]
    raw = next(j for j in slurm_lab.squeue() if str(j["job_id"]) == job_id)
    assert raw["job_state"] == "RUNNING" and "node2" in raw["excluded_nodes"]


def test_the_management_commands_run_the_same_over_http_and_issue_no_token(
    head_node: HeadNode, slurm_lab: SlurmLab, tmp_path: Path
) -> None:
    cluster = lab_cluster(slurm_lab)
    token_file = head_node.token_file(cluster, "console-host")
    common = ["--url", head_node.url, "--token-file", str(token_file)]
    common += ["--slurm-conf", str(slurm_lab.slurm_conf), "--once"]
    call_command("run_controller", *common)
    call_command("run_watchdog", *common, "--state-file", str(tmp_path / "w.json"))
    assert list(ControllerToken.objects.values_list("name", flat=True)) == ["console-host"]
    assert token("console-host").heartbeat["role"] == "watchdog"  # the last to beat
    with pytest.raises(CommandError, match="cannot read the token file"):
        call_command("run_controller", "--url", head_node.url, "--token-file", "/nonexistent")
    with pytest.raises(CommandError, match="--url"):
        call_command("run_watchdog", "--token-file", str(token_file))
