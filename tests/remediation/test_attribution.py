"""Attribution: the hosts an interruption implicates, from every origin the loop knows, limited
to the attempt's nodes, and the explanation that says which origin named each node."""

from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_lines
from detection.core.interruption import Confidence, Evidence, HostOrigin, Interruption
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
from remediation.core.attribution import AttemptView, attribute, pci_key

XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def xid(**changes: object) -> Interruption:
    base = Interruption(
        kind=Kind.CRASH,
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        confidence=Confidence(0.95, ConfidenceLabel.ESTABLISHED),
        root_cause="nvrm_xid:n2",
        summary="Root cause on n2: Xid 79, GPU has fallen off the bus",
        explanation="Root cause on n2: Xid 79, GPU has fallen off the bus.",
        hosts=("n2",),
        evidence=(Evidence(text=XID_LINE, host="n2"),),
        signature="nvrm_xid",
        node_local=True,
        host_origins=(("n2", HostOrigin.TEXT),),
        pci_ids=("0000:3b:00",),
    )
    return Interruption(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def node_fail() -> Interruption:
    return Interruption(
        kind=Kind.CRASH,
        category=Category.NODE_OR_PROCESS_FAILURE,
        attribution=Attribution.NONE,
        confidence=Confidence(0.4, ConfidenceLabel.HYPOTHESIS),
        root_cause="slurm:NODE_FAIL",
        summary="Slurm: job 7 ended NODE_FAIL",
        explanation="Slurm: job 7 ended NODE_FAIL.",
        signature="slurm_node_fail",
        node_local=True,
    )


def test_a_node_of_the_attempt_named_by_the_evidence_is_implicated() -> None:
    view = AttemptView(nodes=("n1", "n2"), partition="gpu", step=10)
    result = attribute(xid(), view)
    assert result.incident.hosts == ("n2",)
    assert (result.incident.partition, result.incident.step) == ("gpu", 10)
    assert (result.incident.signature, result.incident.node_local) == ("nvrm_xid", True)
    # Detection's explanation already says how it named n2; a detector's finding may not.
    assert "Implicated" not in result.explanation
    assert "Implicated: n2." in attribute(xid(host_origins=()), view).explanation
    assert "Confidence: established (the log establishes it)." in result.explanation


def test_a_node_outside_the_attempt_is_never_implicated() -> None:
    result = attribute(xid(), AttemptView(nodes=("n1", "n3")))
    assert result.incident.hosts == ()
    assert result.outside_hosts == ("n2",)
    assert "not part of this attempt: n2" in result.explanation


def test_before_the_scheduler_reports_the_nodes_the_evidence_hosts_stand() -> None:
    assert attribute(xid(), AttemptView()).incident.hosts == ("n2",)


def test_an_xid_line_without_a_host_is_placed_by_the_pci_address_its_gpu_reported() -> None:
    anonymous = xid(hosts=(), host_origins=(), root_cause="nvrm_xid")
    view = AttemptView(nodes=("n1", "n2", "n3"), xid_hosts={pci_key("00000000:3B:00.0"): ("n3",)})
    result = attribute(anonymous, view)
    assert result.incident.hosts == ("n3",)
    assert "n3 (its GPU at that PCI address reported it)" in result.explanation


def test_a_pci_address_two_nodes_reported_names_neither() -> None:
    anonymous = xid(hosts=(), host_origins=(), root_cause="nvrm_xid")
    view = AttemptView(nodes=("n1", "n3"), xid_hosts={"3b:00": ("n1", "n3")})
    result = attribute(anonymous, view)
    assert result.incident.hosts == ()
    assert result.incident.node_local  # still node-local: exclude the node that logged it


def test_pci_addresses_are_one_spelling_whatever_the_driver_or_exporter_prints() -> None:
    spellings = {"PCI:0000:3b:00", "00000000:3B:00.0", "0000:3b:00.0", "3b:00"}
    assert {pci_key(spelling) for spelling in spellings} == {"3b:00"}


def test_a_node_failure_names_the_one_node_the_scheduler_marked_down() -> None:
    result = attribute(node_fail(), AttemptView(nodes=("n1", "n2"), unhealthy_nodes=("n2", "n9")))
    assert result.incident.hosts == ("n2",)
    assert (result.incident.attribution, result.incident.confidence_label) == (
        "hardware",
        "supported",
    )
    assert "n2 (the scheduler marked it unhealthy)" in result.explanation


def test_two_down_nodes_leave_the_failure_unattributed() -> None:
    result = attribute(node_fail(), AttemptView(nodes=("n1", "n2"), unhealthy_nodes=("n1", "n2")))
    assert result.incident.hosts == ()
    assert "reports n1, n2 unhealthy, but nothing ties one node" in result.explanation


# --- hosts from the excerpt, each origin said -------------------------------------------------


def hosts_of(lines: list[str], context: DiagnosisContext | None = None, hints=None) -> dict:
    found = diagnose_lines(lines, context, host_hints=hints)
    return dict(found.host_origins)


def test_a_host_named_in_the_line() -> None:
    line = f"Nov 29 11:00:01 gpu-07 kernel: {XID_LINE}"
    assert hosts_of([line]) == {"gpu-07": HostOrigin.TEXT}


def test_a_host_known_from_the_log_the_line_was_read_from() -> None:
    assert hosts_of([XID_LINE], hints=["gpu-07"]) == {"gpu-07": HostOrigin.STREAM}


def test_a_host_from_the_rank_layout_the_caller_knows() -> None:
    line = "[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    context = DiagnosisContext(nodes=("a1", "a2"), tasks_per_node=8)
    assert hosts_of([line], context) == {"a2": HostOrigin.RANK}


def test_a_host_from_the_layout_the_excerpt_shows() -> None:
    lines = [
        "gpu-12:815:864 [3] NCCL INFO comm 0x55d0c3a0 rank 11 nranks 16 cudaDev 3 - Init COMPLETE",
        "[rank11]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]
    assert hosts_of(lines) == {"gpu-12": HostOrigin.RANK}


def test_a_host_whose_own_log_the_excerpt_is() -> None:
    context = DiagnosisContext(source_host="gpu-07")
    assert hosts_of([XID_LINE], context) == {"gpu-07": HostOrigin.EXCERPT}


def test_the_only_node_the_excerpt_shows() -> None:
    lines = ["Exec host:  gpu-2-17/5", "job preempted (node failure)"]
    assert hosts_of(lines) == {"gpu-2-17": HostOrigin.ONLY_NODE}
    prompt = ["zeyer@cn-234 ~ % nvidia-smi", "Unable to determine the device handle for GPU0"]
    assert hosts_of(prompt) == {"cn-234": HostOrigin.ONLY_NODE}


def test_the_explanation_says_which_origin_named_the_node() -> None:
    found = diagnose_lines([XID_LINE], host_hints=["gpu-07"])
    assert "gpu-07 (the line was read from its log)" in found.explanation
