"""Registering clusters and changing their registration: ``manage.py add_cluster`` /
``configure_cluster``, ``POST``/``PUT /api/v1/clusters/`` and the console's cluster form.

All of them end in the fleet's services, so every document is checked by ``Cluster.full_clean``
(one validator, the same words everywhere) and every change is audited. People need the admin
role; the commands act as ``system:cli`` (whoever can run ``manage.py`` holds the database).
Registering again with the same settings changes and audits nothing. A change that the
approval workflow reserves for two people (the gate, or the policy or allowlist of a cluster in
action mode) is never applied by a command: it says so, and the API and form ask for approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from fleet import services as fleet
from fleet.models import Cluster

from . import policy_approval
from .models import PolicyChangeRequest
from .reviews import ApprovalRefused, _require, actor_of
from .roles import ADMIN

CLI_ACTOR = "system:cli"


@dataclass(frozen=True)
class Outcome:
    """What registering did: created, changed these settings, or asked for approval."""

    cluster: Cluster
    created: bool = False
    changed: tuple[str, ...] = ()
    pending: PolicyChangeRequest | None = None


class ClusterExists(Exception):
    """``add_cluster`` of a name already registered with other settings."""


class NoSuchCluster(Exception):
    pass


def as_registered(settings: dict[str, Any], *, new: bool) -> dict[str, Any]:
    """A cluster a person registers is a Slurm cluster unless its scheduler document says
    ``"backend": "simulated"`` (the demo's are seeded apart): a document left out, or one that
    names no backend, must not make it read the simulator's files."""
    scheduler = settings.get("scheduler")
    if scheduler is None:
        return {**settings, "scheduler": {"backend": "slurm"}} if new else settings
    if isinstance(scheduler, dict) and "backend" not in scheduler:
        return {**settings, "scheduler": {"backend": "slurm", **scheduler}}
    return settings


def create(user: Any, name: str, settings: dict[str, Any]) -> Outcome:
    """A person registers a cluster (admin). It starts in monitor mode."""
    _require(user, ADMIN, "registering a cluster", None)
    fleet.registration_changes(Cluster(), settings)  # refuses unknown settings by name
    settings = as_registered(settings, new=True)
    if Cluster.objects.filter(name=name).exists():
        raise ClusterExists(f"a cluster named {name!r} is registered already; change it instead")
    cluster = fleet.create_cluster(actor_of(user), name, **settings)
    return Outcome(cluster, created=True, changed=tuple(settings))


def change(user: Any, cluster: Cluster, settings: dict[str, Any], note: str = "") -> Outcome:
    """A person changes a registration (admin); unchanged settings are left alone."""
    _require(user, ADMIN, "changing a cluster's registration", None)
    changes = fleet.registration_changes(cluster, as_registered(settings, new=False))
    if not changes:
        return Outcome(cluster)
    result = policy_approval.change_cluster_settings(user, cluster, changes, note)
    if isinstance(result, PolicyChangeRequest):
        return Outcome(cluster, pending=result)
    return Outcome(result, changed=tuple(changes))


@transaction.atomic
def configure_from_cli(
    name: str, settings: dict[str, Any], *, may_create: bool, may_change: bool
) -> Outcome:
    """What ``add_cluster`` (create; the same again is fine) and ``configure_cluster`` (create
    or bring to these settings) do."""
    cluster = Cluster.objects.select_for_update().filter(name=name).first()
    settings = as_registered(settings, new=cluster is None)
    if cluster is None:
        if not may_create:
            raise NoSuchCluster(f"no cluster named {name!r}: add_cluster registers one")
        cluster = fleet.create_cluster(CLI_ACTOR, name, **settings)
        return Outcome(cluster, created=True, changed=tuple(settings))
    changes = fleet.registration_changes(cluster, settings)
    if not changes:
        return Outcome(cluster)
    if not may_change:
        raise ClusterExists(
            f"{name} is registered with other {', '.join(sorted(changes))}: "
            "configure_cluster changes it"
        )
    why = policy_approval.approval_needed(cluster, changes)
    if why:
        raise ApprovalRefused(
            f"not applied: {'; '.join(why)}. A second person must approve it: ask on the "
            "cluster's settings page or with PATCH /api/v1/clusters/NAME/"
        )
    return Outcome(
        fleet.update_cluster_settings(CLI_ACTOR, cluster, **changes), changed=tuple(changes)
    )
