"""Checkpoint and evaluation lines as the frameworks print them (pure: no Django)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detection.core.checkpoints import (
    CheckpointState,
    LastCheckpoint,
    Phase,
    Resume,
    parse_checkpoint,
    resume_verdict,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

# (line as printed, phase, step, framework): the text of each comes from the framework's source.
LINES = [
    # Megatron-LM megatron/training/checkpointing.py
    (
        "saving checkpoint at iteration     100 to /ckpt/gpt in torch_dist format",
        Phase.SAVE_STARTED,
        100,
        "megatron",
    ),
    (
        "  successfully saved checkpoint from iteration     100 to /ckpt/gpt [ t 1/2, p 1/1 ]",
        Phase.SAVED,
        100,
        "megatron",
    ),
    (
        " loading distributed checkpoint from /ckpt/gpt at iteration 100",
        Phase.LOAD_STARTED,
        100,
        "megatron",
    ),
    (
        "  successfully loaded checkpoint from /ckpt/gpt [ t 1/2, p 1/1 ] at iteration 100",
        Phase.LOADED,
        100,
        "megatron",
    ),
    (
        "    will not load any checkpoints and will start from random",
        Phase.FRESH_START,
        None,
        "megatron",
    ),
    ("Evaluating iter 10/100", Phase.EVAL_STARTED, None, "megatron"),
    # DeepSpeed runtime/checkpoint_engine/torch_checkpoint_engine.py (tag global_step<N>)
    (
        "[2023-07-24 13:21:33,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint "
        "global_step10 is about to be saved!",
        Phase.SAVE_STARTED,
        10,
        "deepspeed",
    ),
    (
        "[INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step10 is "
        "ready now!",
        Phase.SAVED,
        10,
        "deepspeed",
    ),
    (
        "[INFO] [torch_checkpoint_engine.py:27:load] [Torch] Loading checkpoint from "
        "/ckpt/global_step10/mp_rank_00_model_states.pt...",
        Phase.LOAD_STARTED,
        10,
        "deepspeed",
    ),
    # NeMo (Megatron's own line, capitalised, and its async finalisation)
    (
        "[NeMo I 2025-06-18 16:53:08 nemo_logging:393] Successfully saved checkpoint from iteration"
        "      49 to /r/checkpoints/epoch=0-val_loss=3.11-step=49-consumed_samples=200.0.ckpt",
        Phase.SAVED,
        49,
        "megatron",
    ),
    (
        "[NeMo I 2025-05-15 23:42:54 nemo_logging:393] Async checkpoint save for step 50 "
        "(/r/checkpoints/epoch=0-val_loss=3.11-step=49-consumed_samples=200.0.ckpt) finalized "
        "successfully.",
        Phase.SAVED,
        49,
        "nemo",
    ),
    (
        "[NeMo I 2025-05-16 08:00:01 exp_manager:400] Resuming training from checkpoint: "
        "/r/checkpoints/epoch=0-val_loss=3.11-step=49-consumed_samples=200.0-last.ckpt",
        Phase.LOAD_STARTED,
        49,
        "nemo",
    ),
    # HF Trainer trainer.py
    (
        "[INFO|trainer.py:3984] 2025-01-01 10:00:00,000 >> Saving model checkpoint to "
        "/out/checkpoint-500",
        Phase.SAVE_STARTED,
        500,
        "hf",
    ),
    ("  Continuing training from global step 500", Phase.LOADED, 500, "hf"),
    ("***** Running Evaluation *****", Phase.EVAL_STARTED, None, "hf"),
    ("{'eval_loss': 1.23, 'eval_runtime': 3.2, 'epoch': 1.0}", Phase.EVAL_ENDED, None, "hf"),
    # PyTorch Lightning callbacks/model_checkpoint.py, trainer/connectors/checkpoint_connector.py
    (
        "Epoch 3, global step 4000: 'val_loss' reached 0.28007 (best 0.28007), saving model to "
        "'/log/epoch=3-step=4000.ckpt' as top 1",
        Phase.SAVE_STARTED,
        4000,
        "lightning",
    ),
    (
        "Restoring states from the checkpoint path at /log/epoch=3-step=4000.ckpt",
        Phase.LOAD_STARTED,
        4000,
        "lightning",
    ),
    (
        "Restored all states from the checkpoint at /log/epoch=3-step=4000.ckpt",
        Phase.LOADED,
        4000,
        "lightning",
    ),
    # torch.distributed.checkpoint: torchtitan components/checkpoint.py, and DCP's own events
    (
        "[rank0]:2025-04-01 00:25:54,090 - root - INFO - Saving a full checkpoint at last step, "
        "step 644.",
        Phase.SAVE_STARTED,
        644,
        "dcp",
    ),
    (
        "[rank0]:2025-04-01 00:25:59,616 - root - INFO - Finished saving the checkpoint "
        "(or staging if async is enabled)in 5.53 seconds.",
        Phase.SAVED,
        None,
        "dcp",
    ),
    ("[rank0]: INFO - Loading the checkpoint at step 200.", Phase.LOAD_STARTED, 200, "dcp"),
    ("[rank0]: INFO - Finished loading the checkpoint in 1.20 seconds.", Phase.LOADED, None, "dcp"),
    (
        "DEBUG:dcp_logger:{'checkpoint_id': '/ckpt/step-20', 'uuid': '1', 'func_name': 'save', "
        "'world_size': '8', 'event': 'start', 'time': 1}",
        Phase.SAVE_STARTED,
        20,
        "dcp",
    ),
    (
        "DEBUG:dcp_logger:{'checkpoint_id': '/ckpt/step-20', 'uuid': '1', 'func_name': 'save', "
        "'world_size': '8', 'event': 'end', 'time': 2}",
        Phase.SAVED,
        20,
        "dcp",
    ),
]


@pytest.mark.parametrize(("line", "phase", "step", "framework"), LINES)
def test_checkpoint_lines_of_each_framework(line, phase, step, framework) -> None:
    event = parse_checkpoint(line)
    assert event is not None
    assert (event.phase, event.step, event.framework) == (phase, step, framework)


@pytest.mark.parametrize(
    "line",
    [
        " iteration      100/  1000 | consumed samples: 1 | lm loss: 2.1 |",
        "checkpoint dir is /ckpt, save interval 1000",
        "Epoch 3, global step 4000: 'val_loss' was not in top 1",
        "x" * 5000 + " successfully saved checkpoint from iteration 1",
    ],
)
def test_other_lines_are_not_checkpoint_events(line) -> None:
    assert parse_checkpoint(line) is None


@given(st.text(max_size=300))
def test_any_text_parses_without_error(text: str) -> None:
    event = parse_checkpoint(text)
    assert event is None or event.step is None or event.step >= 0


def test_a_blocking_save_is_written_when_training_goes_on() -> None:
    hf = parse_checkpoint("Saving model checkpoint to /out/checkpoint-500")
    assert hf is not None
    state = CheckpointState().observe(T0, hf).observe_progress(T0 + timedelta(seconds=30))
    assert (state.saved_step, state.saved_at) == (500, T0 + timedelta(seconds=30))


def test_an_async_save_waits_for_its_own_end() -> None:
    started = parse_checkpoint("saving checkpoint at iteration 100 to /ckpt in torch_dist format")
    ended = parse_checkpoint("  successfully saved checkpoint from iteration 100 to /ckpt")
    assert started is not None and ended is not None
    state = CheckpointState().observe(T0, started).observe_progress(T0 + timedelta(seconds=5))
    assert state.saved_step is None
    state = state.observe(T0 + timedelta(seconds=40), ended)
    assert (state.saved_step, state.saved_at) == (100, T0 + timedelta(seconds=40))


def test_the_state_survives_its_json() -> None:
    saved = parse_checkpoint("[Torch] Checkpoint global_step10 is ready now!")
    assert saved is not None
    state = CheckpointState().observe(T0, saved)
    assert CheckpointState.from_json(state.as_json()) == state
    assert CheckpointState.from_json(None) == CheckpointState()


LAST = LastCheckpoint(step=200, at=T0, path="/ckpt/gpt")


@pytest.mark.parametrize(
    ("loaded_step", "loaded_path", "expected"),
    [
        (None, "", Resume.FROM_SCRATCH),
        (200, "", Resume.RESUMED),
        (None, "/ckpt/gpt", Resume.RESUMED),
        (100, "/ckpt/gpt-old", Resume.OLDER_CHECKPOINT),
    ],
)
def test_whether_a_restart_resumed_from_the_last_checkpoint(
    loaded_step, loaded_path, expected
) -> None:
    state = CheckpointState(loaded_step=loaded_step, loaded_path=loaded_path)
    verdict = resume_verdict(LAST, state)
    assert verdict is not None and verdict.resume is expected


def test_a_load_that_names_nothing_known_cannot_be_judged() -> None:
    assert resume_verdict(LAST, CheckpointState(loaded_path="/elsewhere/model")) is None
