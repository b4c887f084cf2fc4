"""Decisions from the shape of the evidence (phase, locality, resource, recurrence), not from one
phrasing: the same failure before the first step and after training ran, a storage failure
while a checkpoint is written and while data is read, a GPU error seen once and twice on a host.
Library tests: no Django."""

from __future__ import annotations

import pytest

from detection.core.diagnosis import diagnose_bytes
from detection.core.shape import Phase, checkpoint_line, phase_of
from remediation.core.incident import History
from remediation.core.policy import InvalidPolicy, parse_policy
from remediation.core.verdict import judge_excerpt

STORE_LOST = (
    "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
    "clients joined."
)
MEGATRON_STEP = (
    " iteration      120/  500000 | consumed samples:        15360 | elapsed time per iteration "
    "(ms): 1432.1 | learning rate: 1.500E-04 | global batch size:   128 | lm loss: 6.412E+00 |"
)
EIO = "OSError: [Errno 5] Input/output error"


def decided(*lines: str) -> dict[str, object]:
    found, _ = judge_excerpt("\n".join(lines).encode())
    return found.to_dict()


def test_a_store_no_client_reaches_before_the_first_step_is_configuration_and_stops() -> None:
    got = decided(
        '  File "train.py", line 10, in <module>', "    dist.init_process_group()", STORE_LOST
    )
    assert (got["category"], got["attribution"], got["action"]) == (
        "interconnect_network",
        "system_software",
        "stop",
    )
    assert "MASTER_ADDR" in str(got["explanation"])


def test_the_same_store_lost_after_training_ran_is_an_outage_and_restarts() -> None:
    got = decided(MEGATRON_STEP, STORE_LOST)
    assert (got["category"], got["attribution"], got["action"]) == (
        "interconnect_network",
        "interconnect",
        "restart",
    )


def test_the_phase_reads_progress_before_the_failure_and_start_up_steps_anywhere() -> None:
    assert phase_of([MEGATRON_STEP, STORE_LOST], failed_at=2) is Phase.TRAINING
    # Progress printed after the failure line does not make it a training-time failure.
    assert phase_of([STORE_LOST, "Loading checkpoint shards: 100%", MEGATRON_STEP], 1) is (
        Phase.STARTUP
    )
    assert phase_of(["Loading checkpoint shards:  57%| 4/7 [00:37<00:28,  9.42s/it]"], 1) is (
        Phase.STARTUP
    )
    assert phase_of([EIO], 1) is Phase.UNKNOWN


def test_every_failure_explanation_names_its_phase_locality_and_resource() -> None:
    for lines in ((STORE_LOST,), (MEGATRON_STEP, EIO), ("RuntimeError: CUDA out of memory.",)):
        explanation = str(decided(*lines)["explanation"])
        assert "Evidence: phase " in explanation
        assert "; locality " in explanation and "; resource " in explanation


def test_a_storage_failure_while_a_checkpoint_is_written_stops_and_says_what_to_fix() -> None:
    got = decided(
        MEGATRON_STEP,
        "saving checkpoint at iteration     200 to /lustre/ckpt in torch_dist format",
        "Traceback (most recent call last):",
        '  File "megatron/training/checkpointing.py", line 400, in save_checkpoint',
        EIO,
    )
    assert (got["category"], got["action"]) == ("filesystem_io", "stop")
    assert "checkpoint could not be saved or loaded" in str(got["explanation"])


def test_the_same_storage_failure_while_reading_data_restarts() -> None:
    got = decided(MEGATRON_STEP, '  File "data/indexed_dataset.py", line 88, in read', EIO)
    assert (got["category"], got["action"]) == ("filesystem_io", "restart")


def test_an_old_checkpoint_save_far_before_the_failure_does_not_count() -> None:
    lines = ["saving checkpoint at iteration 100 to /ckpt", *[MEGATRON_STEP] * 60, EIO]
    assert checkpoint_line(lines, failed_at=len(lines)) is None


def test_activation_checkpointing_is_not_a_checkpoint() -> None:
    assert checkpoint_line(["Gradient checkpointing is enabled", EIO], failed_at=2) is None


def test_the_recurrence_of_an_unknown_cuda_error_excludes_the_host_it_recurred_on() -> None:
    from detection.core.interruption import Confidence, Interruption
    from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
    from remediation.core.attribution import AttemptView
    from remediation.core.verdict import judge

    hit = Interruption(
        kind=Kind.CRASH,
        category=Category.GPU_HARDWARE,
        attribution=Attribution.HARDWARE,
        confidence=Confidence(0.7, ConfidenceLabel.SUPPORTED),
        root_cause="gpu_cuda_unknown_error:n7",
        summary="unknown error",
        hosts=("n7",),
        signature="gpu_cuda_unknown_error",
        node_local=True,
        host_origins=(("n7", "the line was read from its log"),),
    )
    view = AttemptView(nodes=("n7", "n8"))
    assert judge(hit, attempt=view).decision.action.value == "restart"
    earlier = History(root_causes=(("gpu_cuda_unknown_error:n7", 10),), restarts=1)
    second = judge(hit, attempt=view, history=earlier).decision
    assert (second.action.value, second.exclude) == ("restart_excluding_node", ("n7",))
    elsewhere = History(root_causes=(("gpu_cuda_unknown_error:n3", 10),), restarts=1)
    assert judge(hit, attempt=view, history=elsewhere).decision.action.value == "restart"


def test_a_nan_gradient_norm_that_turns_finite_again_is_not_a_divergence() -> None:
    recovered = decided(
        "Epoch [1][100/62598] lr: 1.000e-03, loss: 1.9091, grad_norm: nan",
        "Epoch [1][200/62598] lr: 1.000e-03, loss: 1.2012, grad_norm: 4.1183",
    )
    assert (recovered["category"], recovered["action"]) == ("benign", "none")
    stuck = decided(
        "Epoch [1][100/62598] lr: 1.000e-03, loss: 1.9091, grad_norm: nan",
        "Epoch [1][200/62598] lr: 1.000e-03, loss: 1.9311, grad_norm: nan",
    )
    assert (stuck["category"], stuck["action"]) == ("numerical_divergence", "stop")


def test_steps_skipped_one_after_another_for_non_finite_gradients_stop() -> None:
    skip = "WARNING - Step {}: detected nan/inf/spiky gradient (norm=2.19); skipping"
    assert decided(*(skip.format(n) for n in range(10, 14)))["action"] == "stop"
    assert decided(*(skip.format(n) for n in range(10, 12)))["action"] == "none"


def test_a_rule_can_be_qualified_by_phase_and_a_bad_qualifier_is_refused() -> None:
    policy = parse_policy({"rules": {"training:interconnect_network": "stop"}})
    found, _ = judge_excerpt("\n".join((MEGATRON_STEP, STORE_LOST)).encode(), policy=policy)
    assert found.decision.action.value == "stop"
    assert found.decision.rule == "training:interconnect_network"
    with pytest.raises(InvalidPolicy, match="startup:node_local"):
        parse_policy({"rules": {"startup:node_local": "stop"}})
    with pytest.raises(InvalidPolicy):
        parse_policy({"rules": {"later:cuda_oom": "stop"}})


def test_a_loss_that_falls_to_exactly_zero_after_learning_is_a_collapse() -> None:
    collapsed = decided("    train/CrossEntropyLoss=12.18", "    train/CrossEntropyLoss=0.0")
    assert (collapsed["category"], collapsed["action"]) == ("numerical_divergence", "stop")
    assert decided("{'loss': 0.0, 'learning_rate': 0.0, 'epoch': 0.0}")["action"] == "none"


def test_megatron_iterations_without_a_loss_diverge_only_past_warm_up_or_at_the_floor() -> None:
    line = (
        " iteration {step:8d}/  500000 | consumed samples:  108 | elapsed time per iteration "
        "(ms): 1979.2 | learning rate: 4.219E-07 | global batch size:    12 | loss scale: {scale} |"
    )
    assert decided(line.format(step=3, scale="4294967296.0"))["action"] == "none"
    assert decided(line.format(step=9, scale="1.0"))["action"] == "stop"
    assert decided(line.format(step=9027, scale="8192.0"))["action"] == "stop"


def test_a_gradient_norm_in_the_millions_is_an_explosion() -> None:
    assert decided("Epoch [1][50/1749] loss: 2.1, grad_norm: 3801898445783.2651")["action"] == (
        "stop"
    )
    assert decided("Epoch [1][50/1749] loss: 2.1, grad_norm: 38.2651")["action"] == "none"


def test_the_same_global_rank_initialised_twice_never_forms_a_group_and_stops() -> None:
    got = decided(
        "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
        "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8",
        "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")
    assert "NODE_RANK" in str(got["explanation"])


def test_a_start_up_failure_after_an_earlier_attempt_trained_is_no_configuration() -> None:
    from remediation.core.attribution import AttemptView
    from remediation.core.verdict import judge

    interruption, _ = diagnose_bytes(
        "\n".join(
            ('  File "train.py", line 10, in <module>', "    dist.init_process_group()", STORE_LOST)
        ).encode()
    )
    first = judge(interruption, attempt=AttemptView()).decision
    assert first.action.value == "stop"
    trained_before = History(root_causes=(("c10d_store_error", 4200),), restarts=1)
    again = judge(interruption, attempt=AttemptView(), history=trained_before).decision
    assert again.action.value == "restart"
