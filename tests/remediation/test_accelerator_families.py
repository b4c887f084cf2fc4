"""Families of other accelerators and vendors' fault reports (ROCm, Gaudi, Ascend), container
start-up, GPU libraries refusing a call, distributed checkpoints and collective desyncs, each
shown with a short phrasing of our own (not a corpus excerpt). Library tests: no Django."""

from __future__ import annotations

from tests.remediation.verdicts import decided

STEPS = ("step 120 | loss 1.91 | lr 2e-4", "step 121 | loss 1.90 | lr 2e-4")


def verdict(got: dict[str, object]) -> tuple[object, object]:
    return got["category"], got["action"]


def test_a_rocm_hardware_exception_takes_the_node_out() -> None:
    got = decided(*STEPS, "HW Exception by GPU node-3 (Agent handle: 0xabc) reason :GPU Hang")
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")


def test_an_amdgpu_ring_timeout_takes_the_node_out() -> None:
    got = decided(*STEPS, "kernel: amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled")
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")


def test_an_npu_fault_graded_for_isolation_names_its_node() -> None:
    got = decided(
        "Warning Occur pod/device-plugin-x device fault, nodeName:npu-07, cardID:1, "
        "faultCodes:80E01801, faultLevelName:SeparateNPU"
    )
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")
    assert got["implicated_hosts"] == ["npu-07"]


def test_an_npu_fault_graded_for_a_rerun_restarts() -> None:
    got = decided(
        "Warning Occur pod/device-plugin-x device fault, nodeName:npu-07, cardID:1, "
        "faultCodes:80E01801, faultLevelName:RestartRequest"
    )
    assert verdict(got) == ("gpu_hardware", "restart")


def test_a_gpu_driver_missing_on_one_host_takes_that_host_out() -> None:
    got = decided(
        "I cuda_diagnostics.cc:10] kernel driver does not appear to be running on this host "
        "(trial-host-4): /proc/driver/nvidia/version does not exist"
    )
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")
    assert got["implicated_hosts"] == ["trial-host-4"]


def test_a_fault_diagnosis_report_naming_a_root_node_excludes_it() -> None:
    got = decided("| | Root cause nodes | ['rack2-n5 device-3'] |")
    assert verdict(got) == ("interconnect_network", "restart_excluding_node")
    assert got["implicated_hosts"] == ["rack2-n5"]


def test_an_error_cqe_between_devices_restarts() -> None:
    got = decided(*STEPS, "EI0013: An error CQE occurred during operator execution.")
    assert verdict(got) == ("interconnect_network", "restart")


def test_hccl_links_not_established_at_start_up_stop() -> None:
    got = decided(
        "[ERROR] HCCL(1,python):[Wait][LinkEstablish]wait socket establish timeout, rank[3]"
    )
    assert verdict(got) == ("interconnect_network", "stop")


def test_an_invalid_ranktable_stops() -> None:
    got = decided("EI0004: The ranktable or rank is invalid, Reason:[duplicate device id]")
    assert verdict(got) == ("application_error", "stop")


def test_a_container_whose_entrypoint_is_missing_stops() -> None:
    got = decided(
        "slurmstepd: error: pyxis: couldn't start container",
        "pyxis:     enroot-switchroot: failed to execute: /bin/zsh: No such file",
        "srun: error: n12: task 0: Exited with exit code 1",
    )
    assert verdict(got) == ("application_error", "stop")
    assert got["implicated_hosts"] == []


def test_an_oci_runtime_that_cannot_create_the_container_stops() -> None:
    got = decided("docker: Error response from daemon: OCI runtime create failed: unable to start")
    assert verdict(got) == ("application_error", "stop")


def test_a_full_disk_behind_a_failed_image_import_is_still_the_cause() -> None:
    got = decided(
        "slurmstepd: error: pyxis: failed to import docker image",
        "slurmstepd: error: pyxis:     write /var/cache/enroot/x.sqsh: No space left on device",
    )
    assert verdict(got) == ("filesystem_io", "stop")


def test_a_gpu_library_refusing_a_setting_stops() -> None:
    got = decided("F0101 conv.cpp:12] Check failed: status == 0 CUDNN_STATUS_BAD_PARAM")
    assert verdict(got) == ("application_error", "stop")


def test_a_hip_call_with_an_invalid_value_stops() -> None:
    got = decided(*STEPS, "hipMemcpyAsync() failed (error code = HIP:1)")
    assert verdict(got) == ("application_error", "stop")


def test_a_library_whose_cuda_setup_failed_stops() -> None:
    got = decided("RuntimeError: CUDA Setup failed despite GPU being available.")
    assert verdict(got) == ("application_error", "stop")


def test_a_distributed_checkpoint_that_fails_on_its_ranks_stops() -> None:
    got = decided(*STEPS, "[rank3]: CheckpointException ranks:dict_keys([0, 1, 2, 3])")
    assert verdict(got) == ("filesystem_io", "stop")


def test_ranks_timing_out_at_different_sequence_numbers_stop_for_a_desync() -> None:
    got = decided(
        *STEPS,
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=410, "
        "OpType=BROADCAST, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.",
        "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=412, "
        "OpType=BROADCAST, Timeout(ms)=600000) ran for 600090 milliseconds before timing out.",
    )
    assert verdict(got) == ("nccl_timeout_hang", "stop")


def test_ranks_timing_out_on_the_same_collective_still_restart() -> None:
    line = (
        "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=410, "
        "OpType=BROADCAST, Timeout(ms)=600000) ran for 600100 milliseconds before timing out."
    )
    got = decided(*STEPS, line.format(r=2), line.format(r=5))
    assert verdict(got) == ("nccl_timeout_hang", "restart")


def test_a_busy_nfs_placeholder_during_clean_up_is_noise() -> None:
    got = decided(
        *STEPS, "OSError: [Errno 39] Directory not empty: '/tmp/run/.nfs0000abcd00001234'"
    )
    assert verdict(got) == ("benign", "none")


def test_a_ray_task_worker_that_died_and_was_retried_is_noise() -> None:
    got = decided(
        "(raylet) WARNING worker.py:200 -- A worker died or was killed while executing a task "
        "by an unexpected system error. Worker exit type: SYSTEM_ERROR"
    )
    assert verdict(got) == ("benign", "none")


def test_one_rank_behind_ranks_that_agree_is_not_read_as_a_desync() -> None:
    line = (
        "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600100 milliseconds before timing out."
    )
    got = decided(*STEPS, *(line.format(r=r, n=77) for r in (0, 1, 3)), line.format(r=2, n=76))
    assert got["action"] == "restart"
