"""A cluster's policy as remediation reads it: the signatures its rules may name, whether the
document is valid (a cluster check), and what a log excerpt of the cluster is judged by."""

from __future__ import annotations

from detection.core.findings import KNOWN_FINDINGS
from detection.core.signatures import SignatureLibrary, build_library
from detection.services import custom_signatures_of
from fleet.models import Cluster
from remediation.core.policy import InvalidPolicy, Policy, parse_policy


class ClusterUnknown(LookupError):
    """No cluster of that name."""


def signature_names(cluster: Cluster) -> set[str]:
    """The signatures a rule of this cluster's policy may name: built-in and its own."""
    custom = {str(spec.get("name")) for spec in custom_signatures_of(cluster.name)}
    return set(KNOWN_FINDINGS) | custom


def policy_problems(cluster: Cluster) -> dict[str, list[str]]:
    """The cluster check remediation registers with the fleet: is the policy document valid?"""
    known = signature_names(cluster) if cluster.pk else set(KNOWN_FINDINGS)
    try:
        parse_policy(cluster.policy, known)
    except InvalidPolicy as exc:
        return {"policy": exc.problems}
    return {}


def excerpt_settings(cluster_name: str) -> tuple[Policy, SignatureLibrary]:
    """What a log excerpt of this cluster is judged by: its policy and its signatures."""
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if cluster is None:
        raise ClusterUnknown(f"no cluster named {cluster_name!r}")
    return parse_policy(cluster.policy), build_library(custom_signatures_of(cluster_name))
