from remediation.core.attribution import AnomalyView, attribute

XID = AnomalyView(
    kind="crash",
    category="gpu_hardware",
    attribution="hardware",
    confidence_label="established",
    hosts=("n2",),
    root_cause="nvrm_xid:n2",
    summary="Root cause on n2: Xid 79, GPU has fallen off the bus",
    evidence=[{"source": "log", "host": "n2", "text": "NVRM: Xid (PCI:0000:3b:00): 79, ..."}],
)


def test_a_node_of_the_attempt_named_by_the_evidence_is_implicated() -> None:
    result = attribute(XID, ["n1", "n2"], partition="gpu", step=10)
    assert result.incident.hosts == ("n2",)
    assert (result.incident.partition, result.incident.step) == ("gpu", 10)
    assert "Implicated: n2." in result.explanation
    assert 'First evidence (log on n2): "NVRM: Xid' in result.explanation
    assert "Confidence: established (the log establishes it)." in result.explanation


def test_a_node_outside_the_attempt_is_never_implicated() -> None:
    result = attribute(XID, ["n1", "n3"])
    assert result.incident.hosts == ()
    assert result.outside_hosts == ("n2",)
    assert "not part of this attempt: n2" in result.explanation


def test_a_node_failure_names_the_one_node_the_scheduler_marked_down() -> None:
    node_fail = AnomalyView(
        "crash",
        "node_or_process_failure",
        "none",
        "hypothesis",
        (),
        "slurm:NODE_FAIL",
        "Slurm: job 7 ended NODE_FAIL",
        [],
    )
    result = attribute(node_fail, ["n1", "n2"], unhealthy_nodes=["n2", "n9"])
    assert result.incident.hosts == ("n2",)
    assert (result.incident.attribution, result.incident.confidence_label) == (
        "hardware",
        "supported",
    )


def test_two_down_nodes_leave_the_failure_unattributed() -> None:
    node_fail = AnomalyView(
        "crash",
        "node_or_process_failure",
        "none",
        "hypothesis",
        (),
        "slurm:NODE_FAIL",
        "Slurm: job 7 ended NODE_FAIL",
        [],
    )
    result = attribute(node_fail, ["n1", "n2"], unhealthy_nodes=["n1", "n2"])
    assert result.incident.hosts == ()
    assert "reports n1, n2 unhealthy, but nothing ties one node" in result.explanation


def test_before_the_scheduler_reports_the_nodes_the_evidence_hosts_stand() -> None:
    assert attribute(XID, []).incident.hosts == ("n2",)
