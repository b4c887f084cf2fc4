"""General failure vocabulary (launchers, schedulers, coordination services, GPU builds) and
the families it decides, each shown with a short phrasing of our own (not a corpus excerpt).
Library tests: no Django."""

from __future__ import annotations

from tests.remediation.verdicts import decided


def verdict(got: dict[str, object]) -> tuple[object, object, object]:
    return got["category"], got["action"], got["implicated_hosts"]


STEPS = ("step 40 | loss 2.91 | lr 1e-4", "step 41 | loss 2.88 | lr 1e-4")


# A process killed by SIGKILL, however the launcher or platform words it.


def test_a_rank_mpirun_saw_killed_by_signal_9_is_a_lost_process() -> None:
    got = decided(
        *STEPS,
        "mpirun noticed that process rank 3 with PID 881 on node c7 exited on signal 9 (Killed).",
    )
    assert got["category"] == "node_or_process_failure"


def test_a_job_ending_with_status_137_was_killed_and_stops() -> None:
    got = decided("[platform] job finished with exit code 137")
    assert (got["category"], got["action"]) == ("node_or_process_failure", "stop")


def test_kills_just_after_the_host_memory_was_nearly_full_stop() -> None:
    got = decided(
        "[INFO] [utils.py:12:mem] CPU Virtual Memory: used = 480.1 GB, percent = 93.2%",
        "[INFO] [launch.py:40:sigkill_handler] Killing subprocess 4242",
    )
    assert (got["category"], got["action"]) == ("node_or_process_failure", "stop")
    assert "memory" in str(got["explanation"])


def test_kills_with_the_host_memory_half_used_are_not_read_as_memory() -> None:
    got = decided(
        "[INFO] [utils.py:12:mem] CPU Virtual Memory: used = 200.0 GB, percent = 41.0%",
        "[INFO] [launch.py:40:sigkill_handler] Killing subprocess 4242",
    )
    assert got["action"] == "restart"


# A coordination service that lost a worker's heartbeat: a lost process, no host named.


def test_a_worker_whose_heartbeat_stopped_after_steps_restarts() -> None:
    got = decided(
        *STEPS,
        "E coordination_service.cc:12] /job:worker/replica:0/task:5 has been set to ERROR in "
        "coordination service: UNAVAILABLE: Task /job:worker/replica:0/task:5 heartbeat timeout.",
    )
    assert verdict(got) == ("node_or_process_failure", "restart", [])


# The scheduler and the launcher refuse the job as written: a retry is refused the same way.


def test_a_refused_submission_stops() -> None:
    got = decided("sbatch: error: Batch job submission failed: Invalid account or partition")
    assert (got["category"], got["action"]) == ("application_error", "stop")


def test_a_working_directory_missing_on_the_compute_node_stops() -> None:
    got = decided(
        "aprun: [NID 12]Exec /scratch/me/train failed: chdir /home/me No such file or directory"
    )
    assert (got["category"], got["action"]) == ("filesystem_io", "stop")


def test_a_failed_job_in_the_accounting_table_restarts() -> None:
    got = decided(
        "       JobID      State ExitCode ",
        "------------ ---------- -------- ",
        "991204           FAILED      9:0 ",
    )
    assert (got["category"], got["action"]) == ("node_or_process_failure", "restart")


def test_a_completed_job_in_the_accounting_table_is_nothing() -> None:
    got = decided("991204        COMPLETED      0:0 ")
    assert got["category"] == "benign"


# The GPU software stack set up wrongly for the node: the same on every retry.


def test_a_build_without_kernels_for_the_gpu_stops() -> None:
    got = decided("n4:12:30 [0] enqueue.cc:9 NCCL WARN Cuda failure 'named symbol not found'")
    assert (got["category"], got["action"]) == ("application_error", "stop")


def test_an_invalid_device_ordinal_stops() -> None:
    got = decided("[ERROR] set device 5 failed: invalid device ordinal")
    assert (got["category"], got["action"]) == ("application_error", "stop")


def test_nccl_shared_memory_that_cannot_grow_stops() -> None:
    got = decided("NCCL WARN Error: failed to extend /dev/shm/nccl-abc123 to 9437184 bytes")
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


# Ranks that cannot connect while their process group is set up: how the job uses the network.


def test_gloo_that_cannot_connect_its_mesh_stops() -> None:
    got = decided("RuntimeError: Gloo connectFullMesh failed with [../pair.cc:210] refused")
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


def test_a_jax_client_connect_barrier_that_times_out_stops() -> None:
    got = decided(
        "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
        "Barrier_id: PjRT_Client_Connect."
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


def test_an_old_nccl_bootstrap_connect_timeout_is_start_up_and_stops() -> None:
    got = decided(
        "h1:10:20 [0] INFO comm 0x5a rank 0 nranks 4",
        "h1:10:21 [0] include/socket.h:300 WARN Call to connect failed : Connection timed out",
        "h1:10:21 [0] INFO bootstrap.cu:28 -> 2 [Net]",
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


# A store key no peer wrote: a stuck exchange, restarted, not a store nobody reaches.


def test_a_store_key_never_written_after_steps_is_a_hang_that_restarts() -> None:
    got = decided(
        *STEPS, "torch.distributed.DistStoreError: wait timeout after 60000ms, keys: /sync/3/17"
    )
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


def test_a_store_key_never_written_with_no_phase_shown_restarts() -> None:
    got = decided("torch.distributed.DistStoreError: wait timeout after 60000ms, keys: /sync/3/17")
    assert got["action"] == "restart"


# Node-local and relative evidence.


def test_an_overheating_gpu_takes_its_node_out() -> None:
    got = decided("WARNING health: clocks event due to thermal violation in GPU 5")
    assert (got["category"], got["action"]) == ("straggler", "restart_excluding_node")


def test_a_ray_actor_whose_owner_node_crashed_takes_that_node_out() -> None:
    got = decided(
        "ray.exceptions.ActorDiedError: The actor died unexpectedly.",
        "Owner Ip address: 10.8.0.31 Owner worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Owner's node has crashed.",
    )
    assert verdict(got) == ("node_or_process_failure", "restart_excluding_node", ["10.8.0.31"])


def test_a_gpu_uuid_before_an_xid_is_not_a_host() -> None:
    got = decided("GPU-77ab: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    assert got["action"] == "restart_excluding_node"
    assert got["implicated_hosts"] == []


# The application's own exception and dynamic loss scaling.


def test_a_bare_python_exception_ending_a_traceback_stops() -> None:
    got = decided(
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "Exception: batch 7 has no labels",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0",
    )
    assert (got["category"], got["action"]) == ("application_error", "stop")


def test_skips_that_halve_a_loss_scale_still_far_above_its_floor_are_nothing() -> None:
    got = decided(
        *(
            f"Gradient overflow. Skipping step, reducing loss scale to {2**n}.0"
            for n in (15, 14, 13, 12, 11)
        )
    )
    assert got["category"] == "benign"


def test_skips_that_name_no_loss_scale_still_count() -> None:
    got = decided(*("non-finite gradients, skipping this step" for _ in range(5)))
    assert (got["category"], got["action"]) == ("numerical_divergence", "stop")


# The process group taking its process down: a failure of the collectives, even when the
# timeout that set it off was printed on another rank's log.


def test_a_process_group_tearing_its_process_down_alone_is_a_collective_failure() -> None:
    got = decided(
        "[rank5]:[E101 03:00:00 ProcessGroupNCCL.cpp:700] [Rank 5] Some NCCL operations have "
        "failed or timed out. Subsequent GPU operations might run on corrupted data.",
        "[rank5]:[E101 03:00:00 ProcessGroupNCCL.cpp:710] [Rank 5] To avoid data "
        "inconsistency, we are taking the entire process down.",
    )
    assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


def test_the_teardown_after_a_named_cause_keeps_the_cause() -> None:
    got = decided(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[Rank 1] To avoid data inconsistency, we are taking the entire process down.",
    )
    assert (got["category"], got["action"]) == ("cuda_oom", "stop")


def test_gloo_and_hccl_waits_on_a_peer_are_collective_timeouts() -> None:
    gloo = decided(
        *STEPS, "[pair.cc:598] Timed out waiting 1800000ms for recv operation to complete"
    )
    hccl = decided(
        *STEPS,
        "EI0002: The wait execution of the Notify register times out. Reason: a remote rank "
        "did not arrive",
    )
    for got in (gloo, hccl):
        assert (got["category"], got["action"]) == ("nccl_timeout_hang", "restart")


def test_hccl_failing_to_build_its_sockets_at_start_up_stops() -> None:
    got = decided(
        "init_process_group(backend='hccl') on 16 devices",
        "EI0006: Getting socket times out. Reason: the peer rank did not connect in 120 s",
    )
    assert (got["category"], got["action"]) == ("interconnect_network", "stop")


# Memory monitors that end processes before the kernel's OOM killer does: the job's footprint.


def test_memory_monitors_killing_workers_stop_for_memory() -> None:
    phrasings = (
        "(raylet) 3 Workers (tasks / actors) killed due to memory pressure (OOM) on node 9f",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        "  Last State:  Terminated   Reason: OOMKilled   Exit Code: 137",
        "systemd-oomd[611]: Killed /user.slice/train.scope due to memory pressure above 60%",
        "Container [pid=77,containerID=c_01] is running beyond physical memory limits.",
    )
    for line in phrasings:
        got = decided(*STEPS, line)
        assert (got["category"], got["action"]) == ("node_or_process_failure", "stop"), line


# The scheduler's controller not answering: an outage of the controller, restarted in any phase.


def test_a_controller_that_did_not_answer_restarts_even_at_launch() -> None:
    phrasings = (
        "srun: error: Unable to confirm allocation for job 51: Socket timed out on send/recv",
        "sbatch: error: slurm_receive_msg: Socket timed out on send/recv operation",
        "srun: error: Unable to contact slurm controller (connect failure)",
    )
    for line in phrasings:
        got = decided("init_process_group(backend='nccl')", line)
        assert (got["category"], got["action"]) == ("node_or_process_failure", "restart"), line


# Queue pairs that could not connect in time: the network, no host singled out.


def test_queue_pairs_that_timed_out_connecting_restart() -> None:
    for line in (
        "event=nccl_err_qp_conn_timeout job=pt-41",
        "rdma: RDMA_CM_EVENT_UNREACHABLE from 10.1.4.2",
    ):
        got = decided(*STEPS, line)
        assert verdict(got) == ("interconnect_network", "restart", []), line
