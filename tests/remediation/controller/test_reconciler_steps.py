"""The controller's steps follow what Slurm shows, read before each one. Slurm is stood in for
at its process boundary by a recorder of the commands the controller would run (the real
cluster runs the same cases in test_end_to_end.py); no Django."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fleet.core.scheduler import (
    ClusterSnapshot,
    JobRecord,
    JobState,
    NodeRecord,
    NodeState,
)
from remediation.controller.reconciler import AdviceItem, Controller, NodeResume

NOW = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)
OURS = "recovery-console advice 7: gpu_hardware: Xid 79 on node2"
PERSON = "swapping the HCA, ticket 4411"


class RecordedSlurm:
    """One job and some nodes; each command is recorded and changes them as Slurm would."""

    def __init__(self, job: JobRecord, *nodes: NodeRecord) -> None:
        self.current = job
        self.nodes = {node.name: node for node in nodes}
        self.commands: list[tuple[str, ...]] = []

    def requeue_hold(self, job_id: str) -> None:
        self._do("requeuehold", job_id, state=JobState.PENDING, held=True)

    def hold(self, job_id: str) -> None:
        self._do("hold", job_id, held=True)

    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None:
        names = tuple(nodes)
        self._do("update", job_id, ",".join(names), excluded_nodes=names)

    def release(self, job_id: str) -> None:
        self._do("release", job_id, held=False)

    def cancel(self, job_id: str) -> None:
        self._do("scancel", job_id, state=JobState.CANCELLED)

    def drain(self, node: str, reason: str) -> None:
        self.commands.append(("drain", node, reason))
        self.nodes[node] = NodeRecord(node, NodeState.DRAINED, reason)

    def resume(self, node: str) -> None:
        self.commands.append(("resume", node))
        self.nodes[node] = NodeRecord(node, NodeState.IDLE)

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(NOW, (self.current,), tuple(self.nodes.values()))

    def job(self, job_id: str) -> JobRecord | None:
        return self.current if job_id == self.current.job_id else None

    def _do(self, command: str, *args: str, **changes: Any) -> None:
        self.commands.append((command, *args))
        self.current = replace(self.current, **changes)


class RecordedAdvisor:
    def __init__(self, *advice: AdviceItem, resumes: Iterable[NodeResume] = ()) -> None:
        self.advice, self.resumes = list(advice), list(resumes)
        self.milestones: list[tuple[str, dict[str, Any]]] = []
        self.dispositions: list[str] = []
        self.resume_reports: list[tuple[str, str]] = []

    def post_snapshot(self, snapshot: ClusterSnapshot) -> None:
        pass

    def active_advice(self) -> list[AdviceItem]:
        return self.advice

    def reconcile(self, advice: AdviceItem, disposition: str, reason: str = "") -> bool:
        self.dispositions.append(disposition)
        return True

    def milestone(
        self, advice: AdviceItem, step: str, at: datetime, detail: dict[str, Any], key: str
    ) -> None:
        self.milestones.append((step, detail))

    def heartbeat(self, info: dict[str, Any]) -> None:
        pass

    def node_resumes(self) -> list[NodeResume]:
        return self.resumes

    def report_resume(self, item: NodeResume, outcome: str, detail: str) -> None:
        self.resume_reports.append((item.node, outcome))


def advice(desired: str = "running_excluding", **extra: Any) -> AdviceItem:
    fields: dict[str, Any] = {
        "id": 7,
        "generation": 1,
        "job_id": "42",
        "attempt_index": 0,
        "partition": "gpu",
        "action": {"cancelled": "stop"}.get(desired, "restart_excluding_node"),
        "desired_state": desired,
        "exclude_nodes": ["node2"] if desired == "running_excluding" else [],
        "drain_nodes": [],
        "enforce": True,
        "state": "dispatched",
    }
    return AdviceItem.from_json(fields | extra)


def job(state: JobState = JobState.PENDING, **extra: Any) -> JobRecord:
    return JobRecord("42", "llama", state, "gpu", **extra)


def run(slurm: RecordedSlurm, *items: AdviceItem, **kwargs: Any) -> RecordedAdvisor:
    advisor = RecordedAdvisor(*items, **kwargs)
    Controller(advisor, slurm, lambda: NOW, report_state=False).cycle()
    return advisor


def test_a_job_slurm_requeued_gets_its_exclusion_while_it_waits_for_its_begin_time() -> None:
    slurm = RecordedSlurm(job(restart_count=1, eligible_time=NOW + timedelta(seconds=100)))
    advisor = run(slurm, advice())
    assert slurm.commands == [("update", "42", "node2")]  # no requeue-hold: Slurm refuses it
    assert [step for step, _ in advisor.milestones] == ["update_exclusions"]
    assert advisor.dispositions == ["pending", "converged"]


@pytest.mark.parametrize("eligible_in", [timedelta(seconds=1), None], ids=["soon", "unknown"])
def test_a_requeued_job_that_could_start_first_is_held_until_its_exclusion_lands(
    eligible_in: timedelta | None,
) -> None:
    eligible = None if eligible_in is None else NOW + eligible_in
    slurm = RecordedSlurm(job(restart_count=1, eligible_time=eligible))
    run(slurm, advice())
    assert slurm.commands == [("hold", "42"), ("update", "42", "node2"), ("release", "42")]


def test_a_failed_job_is_still_requeued_held_excluded_and_released() -> None:
    slurm = RecordedSlurm(job(JobState.FAILED, nodes=("node1", "node2")))
    run(slurm, advice())
    assert [c[0] for c in slurm.commands] == ["requeuehold", "update", "release"]


class RequeuedWhileRunning(RecordedSlurm):
    """A running job requeue-held: Slurm shows it completing (held) until its step is gone."""

    def requeue_hold(self, job_id: str) -> None:
        self._do("requeuehold", job_id, state=JobState.COMPLETING, held=True, restart_count=1)


def test_a_job_requeued_while_running_gets_its_exclusion_once_it_stops_completing() -> None:
    slurm = RequeuedWhileRunning(job(JobState.RUNNING, nodes=("node1", "node2")))
    first = run(slurm, advice())
    # Not released before its exclusion: it would start again on the bad node.
    assert (slurm.commands, first.dispositions) == ([("requeuehold", "42")], ["pending"])
    slurm.current = replace(slurm.current, state=JobState.PENDING)
    second = run(slurm, advice())
    assert slurm.commands[1:] == [("update", "42", "node2"), ("release", "42")]
    assert [step for step, _ in first.milestones + second.milestones] == [
        "requeue_hold",
        "update_exclusions",
        "release",
    ]
    assert second.dispositions == ["pending", "converged"]


def test_a_stop_waits_out_a_completing_job_and_cancels_what_slurm_requeued() -> None:
    slurm = RecordedSlurm(job(JobState.COMPLETING, nodes=("node1",)))
    first = run(slurm, advice("cancelled"))
    assert (slurm.commands, first.dispositions) == ([], ["pending"])  # taken up next cycle
    slurm.current = job(restart_count=1)  # Slurm requeued it (RequeueExit, a node failure)
    second = run(slurm, advice("cancelled"))
    assert slurm.commands == [("scancel", "42")]
    assert second.dispositions == ["pending", "converged"]


def test_a_cancelled_job_is_never_restarted_a_stop_is_final() -> None:
    slurm = RecordedSlurm(job(JobState.CANCELLED, restart_count=1))
    advisor = run(slurm, advice())
    assert (slurm.commands, advisor.dispositions) == ([], ["pending", "abandoned"])


def test_a_persons_drain_keeps_its_reason_and_ours_names_the_advice() -> None:
    person = NodeRecord("node3", NodeState.DRAINING, PERSON)
    slurm = RecordedSlurm(job(JobState.FAILED), person, NodeRecord("node2", NodeState.IDLE))
    # The console sends the reason cleaned already; one line, as sinfo shows it, whatever comes.
    item = advice("running", drain_nodes=["node2", "node3"], drain_reason=OURS + "\n x\t")
    advisor = run(slurm, item)
    assert ("drain", "node2", OURS + " x") in slurm.commands
    assert not any(c[:2] == ("drain", "node3") for c in slurm.commands)
    drains = {d["node"]: d for step, d in advisor.milestones if step == "drain_node"}
    assert drains == {
        "node2": {"node": "node2", "reason": OURS + " x"},
        "node3": {"node": "node3", "left_alone": PERSON},
    }


def test_a_release_resumes_only_a_node_that_still_shows_our_drain() -> None:
    slurm = RecordedSlurm(
        job(JobState.RUNNING),
        NodeRecord("node1", NodeState.DRAINED, OURS),
        NodeRecord("node2", NodeState.DRAINED, PERSON),
        NodeRecord("node3", NodeState.IDLE),
    )
    asked = [NodeResume(name, OURS, NOW.isoformat()) for name in ("node1", "node2", "node3")]
    advisor = run(slurm, resumes=[*asked, NodeResume("node9", OURS, NOW.isoformat())])
    assert slurm.commands == [("resume", "node1")]
    assert advisor.resume_reports == [
        ("node1", "resumed"),
        ("node2", "not_ours"),
        ("node3", "in_service"),
        ("node9", "unknown_node"),
    ]
