"""Console pages. Each page renders partials that live updates re-fetch. Views check roles and
call services; they never write rows themselves nor send events."""

from .anomalies import anomaly_detail
from .audit import audit_trail, chain_status
from .cluster_settings import ask_rule_edit, cluster_settings
from .clusters import cluster_card, cluster_detail, cluster_reporters, cluster_workloads, overview
from .mode import (
    approve,
    approve_policy,
    back_to_monitor,
    mode_page,
    mode_status,
    reject,
    reject_policy,
    request_action,
)
from .nodes import node_list, node_table, release
from .registration import cluster_check, cluster_new, cluster_registration
from .review_queue import agreement_chart, label, review_queue, review_queue_items
from .signals import test_signals
from .workloads import workload_attempts, workload_detail, workload_list, workload_timeline

__all__ = [
    "agreement_chart",
    "anomaly_detail",
    "approve",
    "audit_trail",
    "back_to_monitor",
    "chain_status",
    "cluster_card",
    "cluster_check",
    "cluster_new",
    "cluster_registration",
    "cluster_detail",
    "cluster_reporters",
    "ask_rule_edit",
    "cluster_settings",
    "cluster_workloads",
    "label",
    "approve_policy",
    "reject_policy",
    "mode_page",
    "mode_status",
    "node_list",
    "node_table",
    "overview",
    "reject",
    "release",
    "request_action",
    "review_queue",
    "review_queue_items",
    "test_signals",
    "workload_attempts",
    "workload_detail",
    "workload_list",
    "workload_timeline",
]
