"""Families of failure decided by the shape of their evidence, each shown with a short phrasing
of our own (not a corpus excerpt): the rule is the family's, not one log's. Library tests: no
Django."""

from __future__ import annotations

from tests.remediation.verdicts import decided


def verdict(got: dict[str, object]) -> tuple[object, object, object]:
    return got["category"], got["action"], got["implicated_hosts"]


# The HCA's fatal async events, in each way NCCL has printed them, put the fault on that host.


def test_an_hca_port_error_naming_its_device_takes_the_host_out() -> None:
    got = decided(
        "gpu-a17:4410:4502 [3] transport/net_ib.cc:201 NCCL WARN NET/IB : mlx5_7:1 "
        "Got async error event: port error"
    )
    assert verdict(got) == ("interconnect_network", "restart_excluding_node", ["gpu-a17"])


def test_a_catastrophic_hca_event_after_the_device_name_takes_the_host_out() -> None:
    got = decided(
        "trn-204:91:93 [1] transport/net_ib.cc:88 NCCL WARN NET/IB : mlx5_2:1 Got async "
        "event : local catastrophic error"
    )
    assert verdict(got) == ("interconnect_network", "restart_excluding_node", ["trn-204"])


def test_a_file_name_put_before_each_line_is_not_the_host() -> None:
    got = decided(
        "rank-dump-7.log:trn-204:91:93 [1] transport/net_ib.cc:88 NCCL WARN NET/IB : "
        "mlx5_2:1 Got async event : local catastrophic error"
    )
    assert got["implicated_hosts"] == ["trn-204"]


# The fabric manager's non-fatal NVSwitch errors are logged and recovered; a fatal one is not.


def test_a_non_fatal_nvswitch_error_is_recorded_and_nothing_is_done() -> None:
    got = decided("[ERROR] [tid 77] detected NVSwitch non-fatal error 20034 on fid 2 port 9")
    assert verdict(got) == ("benign", "none", [])


def test_a_fatal_nvswitch_error_is_still_the_gpu_fabric() -> None:
    got = decided("[ERROR] [tid 77] detected NVSwitch fatal error 20034 on fid 2 port 9")
    assert got["category"] == "gpu_hardware"


# UCX giving up resending: the peer or the path stopped answering, not this host.


def test_ucx_retry_exceeded_restarts_without_blaming_the_host() -> None:
    got = decided(
        "[cn-55:2001:0:2001] ib_mlx5_log.c:140  Transport retry count exceeded on "
        "mlx5_4:1/RoCE (synd 0x15 vend 0x81 hw_synd 0/0)"
    )
    assert verdict(got) == ("interconnect_network", "restart", [])


# A running agent that cannot connect to the rendezvous store at all has lost the store's host;
# one whose heartbeat timed out is retrying, and says nothing by itself.


def test_a_keepalive_that_cannot_connect_to_the_store_restarts() -> None:
    got = decided(
        "W0101 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1000] The node "
        "'n7_55_0' has failed to send a keep-alive heartbeat to the rendezvous 'job9' due to "
        "an error of type RendezvousConnectionError."
    )
    assert verdict(got) == ("interconnect_network", "restart", [])


def test_a_keepalive_that_timed_out_once_is_only_noted() -> None:
    got = decided(
        "W0101 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1000] The node "
        "'n7_55_0' has failed to send a keep-alive heartbeat to the rendezvous 'job9' due to "
        "an error of type RendezvousTimeoutError."
    )
    assert verdict(got) == ("benign", "none", [])


# Start-up includes resuming from a checkpoint, setting up model-parallel groups and building
# the model: a process killed there is the job's own demand on host memory, and stops.


def test_a_kill_while_resuming_from_a_checkpoint_is_start_up_and_stops() -> None:
    got = decided(
        "INFO trainer: resuming training from ckpt/step-4000",
        "[launch.py:190:sigkill_handler] Killing subprocess 4411",
    )
    assert (got["category"], got["attribution"], got["action"]) == (
        "node_or_process_failure",
        "application",
        "stop",
    )


def test_a_kill_after_model_parallel_init_is_start_up_and_stops() -> None:
    got = decided(
        "> initializing tensor parallel with size 4",
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 2 (pid: 812) of binary: /opt/py/bin/python",
    )
    assert (got["category"], got["action"]) == ("node_or_process_failure", "stop")


def test_the_same_kill_after_training_steps_is_not_read_as_start_up() -> None:
    got = decided(
        "> initializing tensor parallel with size 4",
        " iteration      300/  9000 | consumed samples: 9600 | lm loss: 3.1E+00 |",
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 2 (pid: 812) of binary: /opt/py/bin/python",
    )
    assert "rule startup:" not in str(got["explanation"])


def test_an_nccl_system_error_while_building_the_model_is_start_up_and_stops() -> None:
    got = decided(
        '  File "/app/workers.py", line 77, in init_model',
        "    torch.distributed.barrier()",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2000, "
        "unhandled system error, NCCL version 2.21.5",
    )
    assert (got["category"], got["attribution"], got["action"]) == (
        "interconnect_network",
        "system_software",
        "stop",
    )


# A run's own summary that finds its loss non-finite is divergence, whatever the layout.


def test_a_metrics_check_finding_the_loss_non_finite_stops() -> None:
    got = decided("WARNING: NaN/Inf detected in metrics: val_loss, accuracy, kl_loss")
    assert (got["category"], got["action"]) == ("numerical_divergence", "stop")


def test_a_metric_check_that_names_no_loss_is_not_divergence() -> None:
    got = decided("note: NaN detected in metrics: throughput (no samples in window)")
    assert got["category"] != "numerical_divergence"


# Ranks that never meet in their first collectives (one still preparing its data) time out on
# every run; the same timeout after training ran, or while communicators are torn down, is a
# hang a restart rides out.

WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:600] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800042 "
    "milliseconds before timing out."
)


def test_a_collective_timeout_while_a_rank_tokenizes_its_data_stops() -> None:
    got = decided("Tokenizing the train split: 41% 8200/20000 [29:58<43:10]", WATCHDOG)
    assert (got["category"], got["attribution"], got["action"]) == (
        "nccl_timeout_hang",
        "application",
        "stop",
    )
    assert "timeout" in str(got["explanation"]).lower()


def test_the_same_timeout_after_training_steps_restarts() -> None:
    got = decided(
        "Tokenizing the train split: 100% 20000/20000",
        " iteration      900/  9000 | consumed samples: 9600 | lm loss: 3.1E+00 |",
        WATCHDOG,
    )
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


def test_a_communicator_torn_down_is_not_read_as_start_up() -> None:
    got = decided(
        "n12:301:340 [3] NCCL INFO comm 0x55aa rank 3 nranks 8 cudaDev 3 busId 1b000 - "
        "Abort COMPLETE",
        WATCHDOG,
    )
    assert got["action"] == "restart"


# Phase read from the collective itself: a process group's first collective (or a timeout that
# says none ever completed) never met once, so no step ran on it; the same later is an outage.

TRAINED = " iteration      300/   10000 | consumed samples: 9600 | lm loss: 1.72"
FIRST_COLLECTIVE = (
    "[rank2]:[E305 09:01:44 ProcessGroupNCCL.cpp:600] [Rank 2] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, NumelIn=8, NumelOut=64, "
    "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
)


def test_a_timeout_of_the_first_collective_is_a_start_up_that_stops() -> None:
    got = decided(FIRST_COLLECTIVE)
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "stop")


def test_a_timeout_report_with_nothing_completed_is_a_start_up_that_stops() -> None:
    got = decided(
        "[rank0]:[E305 09:01:44 ProcessGroupNCCL.cpp:1400] [PG 0 Rank 0] Timeout at NCCL work: "
        "1, last enqueued NCCL work: 1, last completed NCCL work: -1."
    )
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "stop")


def test_a_first_collective_of_a_group_made_after_steps_restarts() -> None:
    got = decided(TRAINED, FIRST_COLLECTIVE)
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


def test_a_later_collective_timing_out_with_no_phase_restarts() -> None:
    got = decided(FIRST_COLLECTIVE.replace("SeqNum=1,", "SeqNum=5120,"))
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


# A task that cannot register with its coordination service is a job that never started.


def test_a_task_whose_registration_timed_out_stops_for_its_set_up() -> None:
    got = decided(
        "gRPC error from coordination_leader while calling "
        "/tensorflow.CoordinationService/RegisterTask: Deadline Exceeded",
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


def test_an_agent_in_error_after_steps_is_an_outage_that_restarts() -> None:
    got = decided(
        TRAINED,
        "E client.cc:96] Coordination service agent in error status: UNAVAILABLE: "
        "failed to connect to all addresses",
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "restart")


# Collectives that time out while one rank saves a checkpoint: every retry reaches the same save.


def test_ranks_timing_out_in_a_barrier_while_a_checkpoint_is_saved_stop() -> None:
    got = decided(
        TRAINED,
        "INFO trainer: saving checkpoint to /ckpt/epoch_2 (gathering the full state dict)",
        '  File "trainer.py", line 310, in barrier',
        "RuntimeError: [gloo/transport/tcp/pair.cc:598] Timed out waiting 1800000ms for recv "
        "operation to complete",
    )
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "stop")
    assert "checkpoint" in str(got["explanation"])


def test_a_timeout_with_no_save_near_it_still_restarts() -> None:
    got = decided(TRAINED, FIRST_COLLECTIVE.replace("SeqNum=1,", "SeqNum=880,"))
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


# fp16 loss scaling at its floor while steps keep being skipped: the run overflows step after
# step, on every rank, and a restart diverges the same way.


def test_the_fused_optimizers_overflow_skips_at_the_scale_floor_stop() -> None:
    got = decided(
        *(
            "[INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. "
            "Attempted loss scale: 1, reducing to 1"
            for _ in range(3)
        ),
        "[INFO] [logging.py:96:log_dist] [Rank 0] step=900, skipped=611, lr=[1e-4]",
    )
    assert verdict(got) == ("numerical_divergence", "stop", [])


def test_a_zero_optimizers_overflow_skip_at_scale_two_stops() -> None:
    got = decided(
        "[deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 2, reducing to 1",
        "[deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 1, reducing to 1",
    )
    assert (got["category"], got["action"]) == ("numerical_divergence", "stop")


def test_the_fused_optimizers_first_skips_from_a_high_scale_are_nothing() -> None:
    got = decided(
        "[INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. "
        "Attempted loss scale: 65536, reducing to 32768.0",
        "[INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from 65536 "
        "to 32768.0",
        "[INFO] [logging.py:96:log_dist] [Rank 0] step=2, skipped=1, lr=[1e-4]",
    )
    assert got["category"] == "benign"


# Updates dropped one after another because the loss is NaN: the run no longer trains, and
# the crash that may follow is its consequence (divergence is the root: stop).


def test_updates_skipped_in_a_row_for_a_nan_loss_stop_before_a_later_crash() -> None:
    got = decided(
        *(f"[train] skipping {n}th update, the loss became NaN" for n in range(20, 25)),
        "Error: CUDA error 700 'an illegal memory access was encountered' in copy kernel",
    )
    assert (got["category"], got["action"]) == ("numerical_divergence", "stop")


def test_one_update_skipped_for_a_nan_loss_is_loss_scaling_at_work() -> None:
    got = decided(
        "[train] skipping 3-rd update due to loss being nan",
        "Ep. 1 : Up. 4 : Sen. 2,048 : Cost 7.91 : Time 1.2s",
        "Ep. 1 : Up. 5 : Sen. 2,560 : Cost 7.85 : Time 1.2s",
    )
    assert got["category"] == "benign"
