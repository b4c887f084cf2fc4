"""The advice lifecycle: the policy's advice on each open anomaly, created or revised (a new
generation) while no controller has claimed it, with the strikes it puts on its nodes (or, in
monitor mode, what it would have done to them); monitor-mode advice of an ended attempt
expires, and enforced advice is withdrawn when its cluster returns to monitor mode."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q

from detection.core.detectors.hang import HangSettings
from detection.core.shape import Phase
from detection.models import (
    Anomaly,
    AnomalyState,
    AttemptMonitor,
    DetectionSettings,
    NodeGpuState,
)
from fleet import audit
from fleet.core.taxonomy import Action
from fleet.models import Attempt, Cluster, ClusterMode, Node
from remediation.core.attribution import AttemptView, pci_key
from remediation.core.decisions import Decision
from remediation.core.incident import History, Incident, restarts_since_progress
from remediation.core.isolation import isolated_since, strikes_since
from remediation.core.policy import Policy, parse_policy
from remediation.core.verdict import Verdict, judge

from ..models import (
    DESIRED_STATE_OF_ACTION,
    Advice,
    AdviceState,
    NodeHealth,
    NodeHealthState,
)
from .common import ACTOR, _audit, _withdraw

UNHEALTHY_NODE_STATES = ("DOWN", "DRAINED", "DRAINING")
SETTLED_STATES = (
    AdviceState.CLAIMED,
    AdviceState.EXECUTED,
    AdviceState.FAILED,
    AdviceState.EXPIRED,
    AdviceState.WITHDRAWN,
)
# Slurm's default MinJobAge: by then slurmctld has forgotten an ended job, and the log evidence
# that sharpens an advice has arrived, so monitor-mode advice of an ended attempt expires.
MONITOR_ADVICE_TTL = timedelta(minutes=5)
EXPIRE_BATCH = 500


# --- advice ----------------------------------------------------------------------------------


def advise_cluster(cluster: Cluster, now: datetime) -> int:
    """Advise on every open anomaly that has no advice yet or changed since its advice (and
    expire monitor-mode advice whose attempt is over)."""
    expire_monitor_advice(cluster, now)
    # Advice a controller claimed or finished is history: later evidence does not revise it,
    # so it is not looked at again (else every cycle would judge it anew for nothing).
    pending = (
        Anomaly.objects.filter(cluster=cluster, state=AnomalyState.OPEN)
        .filter(Q(advice__isnull=True) | Q(updated_at__gt=F("advice__decided_at")))
        .exclude(advice__state__in=SETTLED_STATES)
    )
    grace = timedelta(seconds=parse_policy(cluster.policy).evidence_grace_seconds)
    count = 0
    for anomaly in pending.select_related("attempt", "workload", "cluster").order_by("detected_at"):
        if anomaly.confidence_label == "hypothesis" and now - anomaly.detected_at < grace:
            continue  # the scheduler's word alone: give the log evidence a moment to arrive
        advise(anomaly, now)
        count += 1
    return count


def advise(anomaly: Anomaly, now: datetime) -> Advice:
    """The policy's advice for one anomaly: created, or revised (a new generation) while no
    controller has claimed it yet."""
    cluster, attempt = anomaly.cluster, anomaly.attempt
    policy = parse_policy(cluster.policy)
    view = _attempt_view(attempt, now)
    verdict = judge(
        anomaly.as_interruption(),
        policy,
        view,
        _history(cluster, attempt, anomaly, now, policy, view.step),
        attempt.comment,
    )
    with transaction.atomic():
        advice = Advice.objects.select_for_update().filter(anomaly=anomaly).first()
        if advice is not None and advice.state in SETTLED_STATES:
            return advice  # a controller is on it or it is done: the past is not rewritten
        fields = _advice_fields(cluster, attempt, verdict)
        if advice is None:
            advice = _create_advice(anomaly, fields, now)
        else:
            advice = _revise_advice(advice, fields, now)
        if _acts_on(cluster, attempt):
            _strike(cluster, verdict.incident, anomaly, now)
        else:
            _note_would_isolate(cluster, verdict.incident, anomaly, verdict.decision, now)
    return advice


def _attempt_view(attempt: Attempt, now: datetime) -> AttemptView:
    unhealthy = Node.objects.filter(
        cluster_id=attempt.cluster_id, state__in=UNHEALTHY_NODE_STATES
    ).values_list("name", flat=True)
    # One row or none: a watched attempt has its monitor, with the last step it reported.
    monitor = list(
        AttemptMonitor.objects.filter(attempt=attempt).values_list("last_step", flat=True)[:1]
    )
    step = monitor[0] if monitor else None
    return AttemptView(
        nodes=tuple(attempt.nodes),
        unhealthy_nodes=tuple(unhealthy),
        partition=attempt.partition,
        step=step,
        xid_hosts=_xid_hosts(attempt),
        phase=_startup_seen(attempt, step, bool(monitor), now),
    )


def _startup_seen(attempt: Attempt, step: int | None, watched: bool, now: datetime) -> str:
    """ "startup" as far as the loop can tell (else ""): watched, no step reported yet, and
    running for no longer than a start-up may take. A job whose progress lines we cannot read
    would otherwise look as if it never left start-up. (A step reported is training, which
    attribution reads from the step itself.)"""
    if step or not watched or attempt.started_at is None:
        return ""
    hang = (
        DetectionSettings.objects.filter(cluster_id=attempt.cluster_id)
        .values_list("hang", flat=True)
        .first()
    ) or {}
    grace = float(hang.get("startup_grace_seconds", HangSettings.startup_grace_seconds))
    return Phase.STARTUP.value if (now - attempt.started_at).total_seconds() <= grace else ""


def _xid_hosts(attempt: Attempt) -> dict[str, tuple[str, ...]]:
    """PCI address -> the attempt's hosts whose GPU there last reported an Xid (from what the
    metrics showed of each node), so an Xid line without a host still names its node."""
    states = NodeGpuState.objects.filter(cluster_id=attempt.cluster_id)
    if attempt.nodes:
        states = states.filter(host__in=attempt.nodes)
    found: dict[str, set[str]] = {}
    for host, gpus in states.values_list("host", "gpus"):
        for gpu in (gpus or {}).values():
            if gpu.get("xid") and gpu.get("pci"):
                found.setdefault(pci_key(str(gpu["pci"])), set()).add(host)
    return {pci: tuple(sorted(hosts)) for pci, hosts in found.items()}


def _history(
    cluster: Cluster,
    attempt: Attempt,
    anomaly: Anomaly,
    now: datetime,
    policy: Policy,
    reached: int | None,
) -> History:
    """The workload's past for the policy; ``reached`` is the step this attempt got to."""
    earlier = list(
        Attempt.objects.filter(workload=attempt.workload, first_seen_at__lt=attempt.first_seen_at)
        .exclude(pk=attempt.pk)
        .order_by("first_seen_at")
    )
    causes = dict(
        Anomaly.objects.filter(attempt__in=earlier, family="interruption").values_list(
            "attempt_id", "root_cause"
        )
    )
    steps = dict(
        AttemptMonitor.objects.filter(attempt__in=earlier).values_list("attempt_id", "last_step")
    )
    health = list(NodeHealth.objects.filter(cluster=cluster))
    strike_since = now - timedelta(hours=policy.strike_window_hours)
    breaker_since = now - timedelta(minutes=policy.circuit_breaker_window_minutes)
    # Advice that is not acted on is judged as if it were, from what such advice would have
    # done; advice that is acted on sees only what was really done (or is being done).
    acting = _acts_on(cluster, attempt)
    isolated = _in_flight(cluster) | {h.name for h in health if _isolated(h, breaker_since)}
    if not acting:
        isolated |= {h.name for h in health if _would_isolate_since(h, breaker_since)}
    strikes = {
        h.name: strikes_since(h.strikes, strike_since, anomaly.pk)
        + (0 if acting else strikes_since(h.would_isolate, strike_since, anomaly.pk))
        for h in health
    }
    return History(
        restarts=restarts_since_progress([steps.get(a.pk) for a in earlier], reached),
        root_causes=tuple((causes[a.pk], steps.get(a.pk)) for a in earlier if a.pk in causes),
        excluded=tuple(sorted(_still_excluded(attempt, health))),
        strikes=strikes,
        isolated=tuple(sorted(isolated)),
        cluster_nodes=Node.objects.filter(cluster=cluster).count(),
    )


def _acts_on(cluster: Cluster, attempt: Attempt) -> bool:
    """Whether advice on this attempt is carried out: action mode, inside the allowlist."""
    allowlist = cluster.partitions_allowlist
    return cluster.mode == ClusterMode.ACTION and (not allowlist or attempt.partition in allowlist)


def _in_flight(cluster: Cluster) -> set[str]:
    """Nodes enforced advice is about to take out (dispatched or claimed, not yet reported
    done): counted by the breaker already, so two advices at once cannot overshoot it."""
    nodes: set[str] = set()
    rows = Advice.objects.filter(
        cluster=cluster, enforce=True, state__in=(AdviceState.DISPATCHED, AdviceState.CLAIMED)
    ).values_list("exclude_nodes", "drain_nodes", "anomaly__implicated_hosts")
    for exclude, drain, implicated in rows:
        nodes |= (set(exclude) & set(implicated)) | set(drain)
    return nodes


def _would_isolate_since(health: NodeHealth, since: datetime) -> bool:
    return any(
        (mark.get("exclude") or mark.get("drain")) and datetime.fromisoformat(mark["at"]) >= since
        for mark in health.would_isolate
    )


def _still_excluded(attempt: Attempt, health: list[NodeHealth]) -> set[str]:
    """Nodes earlier advice excluded from this workload, unless a person released them since
    (repaired, they are no longer suspect), and every drained node."""
    released = {h.name: h.released_at for h in health if h.released_at is not None}
    excluded: set[str] = set()
    for nodes, decided_at in Advice.objects.filter(workload=attempt.workload).values_list(
        "exclude_nodes", "decided_at"
    ):
        excluded.update(n for n in nodes if not (n in released and released[n] > decided_at))
    return excluded | {h.name for h in health if h.state == NodeHealthState.DRAINED}


def _isolated(health: NodeHealth, since: datetime) -> bool:
    return isolated_since(health.excluded_at, health.drained_at, since)


def _advice_fields(cluster: Cluster, attempt: Attempt, verdict: Verdict) -> dict[str, Any]:
    decision, incident = verdict.decision, verdict.incident
    allowed = not cluster.partitions_allowlist or attempt.partition in cluster.partitions_allowlist
    enforce = cluster.mode == ClusterMode.ACTION and allowed and decision.action != Action.NONE
    reasons = list(decision.reasons)
    if cluster.mode == ClusterMode.ACTION and not allowed:
        reasons.append(
            f"partition {attempt.partition!r} is outside the action allowlist: advice only"
        )
    return {
        "action": decision.action.value,
        "desired_state": DESIRED_STATE_OF_ACTION[decision.action],
        "exclude_nodes": list(decision.exclude),
        "drain_nodes": list(decision.drain),
        "reasons": reasons,
        "explanation": verdict.explanation,
        "category": incident.category,
        "attribution": incident.attribution,
        "rule": decision.rule,
        "confidence_label": incident.confidence_label,
        "enforce": enforce,
        "state": AdviceState.DISPATCHED if enforce else AdviceState.PROPOSED,
    }


def _create_advice(anomaly: Anomaly, fields: dict[str, Any], now: datetime) -> Advice:
    advice = Advice.objects.create(
        cluster=anomaly.cluster,
        workload=anomaly.workload,
        attempt=anomaly.attempt,
        anomaly=anomaly,
        decided_at=now,
        updated_at=now,
        **fields,
    )
    verb = "advice.dispatched" if advice.enforce else "advice.proposed"
    _audit(advice, verb, {k: v for k, v in fields.items() if k != "explanation"})
    return advice


def _revise_advice(advice: Advice, fields: dict[str, Any], now: datetime) -> Advice:
    changed = {
        k: {"from": getattr(advice, k), "to": v}
        for k, v in fields.items()
        if getattr(advice, k) != v
    }
    advice.decided_at = advice.updated_at = now
    if not changed:
        advice.save(update_fields=["decided_at", "updated_at"])
        return advice
    for name, value in fields.items():
        setattr(advice, name, value)
    advice.generation += 1
    advice.save()
    _audit(advice, "advice.revised", {"generation": advice.generation, **changed})
    return advice


def _strike(cluster: Cluster, incident: Incident, anomaly: Anomaly, now: datetime) -> None:
    """Each implicated node gets one strike per anomaly. Only advice that is acted on strikes;
    the breaker counts a node once the controller reports it excluded or drained."""
    if incident.confidence_label == "hypothesis":
        return
    for host in incident.hosts:
        health, _ = NodeHealth.objects.select_for_update().get_or_create(cluster=cluster, name=host)
        if any(s["anomaly"] == anomaly.pk for s in health.strikes):
            continue
        health.strikes = [*health.strikes, _mark(anomaly, incident, now)]
        if health.state == NodeHealthState.HEALTHY:
            health.state = NodeHealthState.SUSPECT
        health.save()
        audit.record(
            ACTOR,
            "node.struck",
            health,
            cluster=cluster,
            workload=anomaly.workload,
            payload={
                "anomaly": anomaly.pk,
                "strikes": len(health.strikes),
                "category": incident.category,
            },
        )


def _note_would_isolate(
    cluster: Cluster, incident: Incident, anomaly: Anomaly, decision: Decision, now: datetime
) -> None:
    """Monitor mode: what the advice would do to each implicated node, recorded (and audited)
    without a strike, an exclusion or a drain. Revised advice updates its own mark."""
    if incident.confidence_label == "hypothesis":
        return
    for host in incident.hosts:
        health, _ = NodeHealth.objects.select_for_update().get_or_create(cluster=cluster, name=host)
        mark = _mark(anomaly, incident, now) | {
            "exclude": host in decision.exclude,
            "drain": host in decision.drain,
        }
        kept = [m for m in health.would_isolate if m["anomaly"] != anomaly.pk]
        previous = next((m for m in health.would_isolate if m["anomaly"] == anomaly.pk), None)
        if previous is not None:
            mark["at"] = previous["at"]  # the first sighting, as a strike would keep
            if previous == mark:
                continue
        health.would_isolate = [*kept, mark]
        health.save(update_fields=["would_isolate"])
        audit.record(
            ACTOR,
            "node.would_isolate",
            health,
            cluster=cluster,
            workload=anomaly.workload,
            payload={k: mark[k] for k in ("anomaly", "category", "exclude", "drain")},
        )


def _mark(anomaly: Anomaly, incident: Incident, now: datetime) -> dict[str, Any]:
    return {
        "at": now.isoformat(),
        "anomaly": anomaly.pk,
        "workload": anomaly.workload_id,
        "category": incident.category,
    }


def expire_monitor_advice(cluster: Cluster, now: datetime) -> int:
    """Monitor-mode advice whose attempt ended (or was requeued as a new one) more than
    ``MONITOR_ADVICE_TTL`` ago expires, audited: nothing is left to act on, so the controllers'
    active list stays small. Bounded per call; the next cycle takes the rest."""
    ended = Advice.objects.filter(
        cluster=cluster, state=AdviceState.PROPOSED, attempt__ended_at__lte=now - MONITOR_ADVICE_TTL
    ).values_list("pk", flat=True)
    with transaction.atomic():
        over = _locked(list(ended.order_by("pk")[:EXPIRE_BATCH]), AdviceState.PROPOSED)
        for advice in over:
            advice.state, advice.updated_at = AdviceState.EXPIRED, now
            advice.save(update_fields=["state", "updated_at"])
            _audit(
                advice,
                "advice.expired",
                {"generation": advice.generation, "attempt_state": advice.attempt.state},
            )
    return len(over)


def withdraw_enforced_advice(actor: str, cluster: Cluster, reason: str) -> int:
    """Take back every dispatched or claimed advice of ``cluster`` (it returned to monitor
    mode), each audited and announced; a controller holding one stops at the step in hand."""
    enforced = (AdviceState.DISPATCHED, AdviceState.CLAIMED)
    with transaction.atomic():
        ids = Advice.objects.filter(cluster=cluster, state__in=enforced).values_list(
            "pk", flat=True
        )
        taken = _locked(list(ids), *enforced)
        for advice in taken:
            _withdraw(advice, reason, actor)
    return len(taken)


def _locked(ids: list[int], *states: str) -> list[Advice]:
    """Lock advice rows by primary key only, and keep those still in ``states``: no join and no
    index range is locked, so a controller's claim of another row never waits on it (and a
    lock taken with a join would also hold the cluster's row, against the mode switch)."""
    rows = Advice.objects.select_for_update().filter(pk__in=ids).order_by("pk")
    return [advice for advice in rows if advice.state in states]
