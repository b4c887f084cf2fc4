"""check_cluster's verdicts, stage by stage, from what one read of each part saw (plain
Python: the report reads only frozen records)."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from remediation.core.checkup import (
    AdviceSeen,
    ConsoleJob,
    Heartbeat,
    JobSeen,
    Observations,
    SchedulerRead,
    SourceRead,
    report,
    worst,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB = JobSeen("4242", "RUNNING", ("node1", "node2"))
FILES = SourceRead(
    "job-files",
    "logs",
    items=120,
    recent=30,
    newest=NOW - timedelta(seconds=4),
    by_job={"4242": 30},
)
HEALTHY = Observations(
    cluster="research",
    mode="monitor",
    now=NOW,
    window=timedelta(minutes=5),
    scheduler=SchedulerRead("local", (JOB,), nodes=4, version="22.5.8"),
    sources=(FILES,),
    heartbeats=(
        Heartbeat("head-node", "controller", NOW - timedelta(seconds=5), {"transport": "local"}),
        Heartbeat("watchdog", "watchdog", NOW - timedelta(seconds=8)),
    ),
    console_jobs={"4242": ConsoleJob("4242", 0, "RUNNING")},
)


def by_stage(seen: Observations) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {f.stage: (f.status, f.summary, f.details) for f in report(seen)}


def test_a_working_cluster_reports_each_stage_in_order() -> None:
    findings = report(HEALTHY)
    assert [f.stage for f in findings] == [
        "scheduler",
        "controller",
        "watchdog",
        "logs job-files",
        "job 4242: visible",
        "job 4242: signal",
        "job 4242: advice",
    ]
    stages = by_stage(HEALTHY)
    assert stages["scheduler"][1] == "read on local: Slurm 22.5.8, 1 jobs (1 running), 4 nodes"
    assert stages["controller"][:2] == ("ok", "head-node: last heartbeat 5 s ago")
    assert stages["logs job-files"][1] == "120 lines read, 30 from the last 5 min, newest 4 s ago"
    assert stages["job 4242: visible"][1] == "Slurm: RUNNING, console: attempt 0, RUNNING"
    assert stages["job 4242: signal"][:2] == ("ok", "job-files: 30 lines")
    assert stages["job 4242: advice"][:2] == ("info", "no anomaly detected, so no advice is due")
    assert worst(findings) == "ok"


def test_a_scheduler_that_cannot_be_read_is_a_problem_with_what_to_check() -> None:
    seen = replace(HEALTHY, scheduler=SchedulerRead("ssh rc@head:22", error="ssh failed: denied"))
    status, summary, details = by_stage(seen)["scheduler"]
    assert status == "problem"
    assert summary == "cannot read Slurm on ssh rc@head:22: ssh failed: denied"
    assert "scheduler document" in details[0]
    # The jobs then come from what the console recorded.
    assert "job 4242: visible" in by_stage(seen)


def test_a_silent_or_missing_controller_and_watchdog_are_named() -> None:
    stale = replace(
        HEALTHY,
        heartbeats=(Heartbeat("head-node", "controller", NOW - timedelta(minutes=10)),),
    )
    stages = by_stage(stale)
    assert stages["controller"][:2] == ("problem", "head-node: last heartbeat 10 min ago")
    assert stages["watchdog"][:2] == ("warning", "no watchdog token is issued")
    assert stages["watchdog"][2][0] == (
        "on the head node: python -m remediation.controller watchdog --url URL --token-file FILE,"
        " with a token from issue_controller_token --cluster research"
    )
    never = replace(HEALTHY, heartbeats=(Heartbeat("head-node", "controller", None),))
    # A token says whose it is only in its heartbeats: unused, it may be either.
    for role in ("controller", "watchdog"):
        status, summary, details = by_stage(never)[role]
        assert (status, summary) == ("warning", f"no {role} has sent a heartbeat yet")
        assert details[0] == "never used: head-node"


def test_a_job_slurm_shows_but_the_console_never_recorded_points_at_the_controller() -> None:
    seen = replace(HEALTHY, console_jobs={})
    status, summary, details = by_stage(seen)["job 4242: visible"]
    assert status == "problem"
    assert summary == "Slurm shows it (RUNNING) but the console has not recorded it"
    assert "is the controller (python -m remediation.controller controller) running?" in details[0]


def test_no_log_source_and_a_quiet_or_broken_one_are_told_apart() -> None:
    none = by_stage(replace(HEALTHY, sources=()))
    assert none["logs"][:2] == ("problem", "no log source is configured")
    quiet = replace(FILES, items=0, recent=0, newest=None, by_job={})
    stages = by_stage(replace(HEALTHY, sources=(quiet,)))
    assert stages["logs job-files"][0] == "warning"
    assert stages["job 4242: signal"][:2] == ("warning", "job-files: 0 lines")
    broken = replace(FILES, error="the directory is missing", loop_error="the directory is missing")
    status, summary, details = by_stage(replace(HEALTHY, sources=(broken,)))["logs job-files"]
    assert (status, summary) == ("problem", "cannot be read: the directory is missing")
    assert details == ("the detection loop's last read said: the directory is missing",)


def test_node_logs_and_metrics_count_for_the_jobs_nodes() -> None:
    node_logs = SourceRead("node-logs", "logs", items=3, recent=3, by_host={"node2": 3})
    metrics = SourceRead("metrics", "metrics", items=16, recent=16, by_host={"node1": 8})
    seen = replace(HEALTHY, sources=(FILES, node_logs, metrics))
    summary = by_stage(seen)["job 4242: signal"][1]
    assert summary == "job-files: 30 lines; node-logs: 3 lines; metrics: 8 samples"


def test_advice_in_monitor_mode_is_published_not_acted_on() -> None:
    advice = AdviceSeen(7, "restart_excluding_node", "proposed", enforce=False)
    job = ConsoleJob("4242", 0, "FAILED", ("crash gpu_hardware",), (advice,))
    stages = by_stage(replace(HEALTHY, console_jobs={"4242": job}))
    assert stages["job 4242: advice"][:2] == ("ok", "#7 restart_excluding_node (proposed)")
    assert stages["job 4242: acted on"][:2] == (
        "info",
        "monitor mode: published for review, not acted on",
    )


def test_enforced_advice_shows_its_steps_or_that_none_came() -> None:
    done = AdviceSeen(7, "restart", "executed", True, ("requeue_hold", "release"))
    waiting = AdviceSeen(8, "stop", "dispatched", True)
    for advice, expected in (
        (done, ("ok", "steps taken: requeue_hold, release")),
        (waiting, ("warning", "enforced, no step reported yet (dispatched)")),
    ):
        job = ConsoleJob("4242", 0, "FAILED", ("crash x",), (advice,))
        seen = replace(HEALTHY, mode="action", console_jobs={"4242": job})
        assert by_stage(seen)["job 4242: acted on"][:2] == expected


def test_an_anomaly_without_advice_points_at_the_worker() -> None:
    job = ConsoleJob("4242", 0, "FAILED", ("hang nccl_timeout_hang",))
    status, summary, details = by_stage(replace(HEALTHY, console_jobs={"4242": job}))[
        "job 4242: advice"
    ]
    assert (status, summary) == ("problem", "anomalies (hang nccl_timeout_hang) but no advice yet")
    assert "Celery worker" in details[0]


def test_a_job_asked_for_that_nobody_knows_is_said_so() -> None:
    seen = replace(HEALTHY, jobs_asked=("999",))
    assert by_stage(seen)["job 999: visible"] == (
        "problem",
        "neither Slurm nor the console knows it",
        (),
    )


def test_a_simulated_cluster_is_not_asked_for_a_controller() -> None:
    seen = replace(HEALTHY, scheduler=SchedulerRead("run_demo", simulated=True), heartbeats=())
    stages = by_stage(seen)
    assert stages["scheduler"][0] == "info"
    assert stages["controller"][:2] == (
        "info",
        "run_demo runs the simulated cluster's controller in-process",
    )
