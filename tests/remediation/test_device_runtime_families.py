"""Families of accelerator runtimes and drivers beyond CUDA's usual lines: device allocators out
of memory, the GPU's firmware (GSP) no longer answering, a GPU fault that leaves the GPU dead,
runtimes timing out on a stream's or a collective's tasks, a TPU core halted by its program's
own check, ROCm's memory access faults, vendor collective libraries' failed calls, XLA's
rendezvous losing a peer, NaN detectors, and completion errors that name no peer. Each is shown
with short phrasings of our own (not corpus excerpts), and a near miss that must stay benign.
Library tests: no Django."""

from __future__ import annotations

import pytest

from tests.remediation.verdicts import decided

STEPS = ("step 120 | loss 1.91 | lr 2e-4", "step 121 | loss 1.90 | lr 2e-4")


def verdict(got: dict[str, object]) -> tuple[object, object]:
    return got["category"], got["action"]


@pytest.mark.parametrize(
    "line",
    [
        "[ERROR] DRV(11,python3):2024-01-02-03:04:05 [devmm_alloc_managed 90]<errno:12, 6> "
        "heap_alloc_managed out of memory, pp=0x1, bytesize=4294967296.",
        "[ERROR] RUNTIME(11,python3) DevMemAlloc:[driver interface] halMemAlloc failed: "
        "device_id=3, size=4294967296, type=2, drvRetCode=6!",
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.00 GiB total)",
        "RuntimeError: [Rank:3] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::"
        "1073741824 (1024)MB",
        "hipMalloc failed: hipErrorOutOfMemory (out of memory)",
    ],
)
def test_an_accelerator_allocator_out_of_device_memory_stops(line: str) -> None:
    assert verdict(decided(*STEPS, line)) == ("cuda_oom", "stop")


def test_an_npu_memory_report_that_is_no_failure_stays_benign() -> None:
    got = decided(
        *STEPS,
        "[INFO] RUNTIME halMemAlloc succeeded: device_id=0, size=1048576",
        "NPU memory allocated: 30.2 GiB, reserved: 32.0 GiB of 64 GiB",
    )
    assert verdict(got) == ("benign", "none")


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: _issueRpcAndWait: rpcSendMessage failed with status 0x0000000f for fn 10!",
        "NVRM: GPU2 rpcRmApiFree_GSP: GspRmFree failed: hClient=0xc1d00001, status=0x0000000f",
        "NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        "NVRM: GPU0 Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL).",
    ],
)
def test_a_gsp_that_no_longer_answers_takes_the_host_of_its_kernel_log_out(message: str) -> None:
    got = decided(f"Mar  3 10:00:01 gpu-n17 kernel: {message}")
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")
    assert got["implicated_hosts"] == ["gpu-n17"]


def test_the_driver_loading_its_gsp_firmware_stays_benign() -> None:
    got = decided(
        "Mar  3 09:59:40 gpu-n17 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for "
        "x86_64  550.54.15",
        "Mar  3 09:59:41 gpu-n17 kernel: NVRM: GPU0 GSP firmware loaded (RPC version 0x03)",
    )
    assert verdict(got) == ("benign", "none")


@pytest.mark.parametrize(
    ("fault", "dead"),
    [
        (
            "RuntimeError: CUDA error: unspecified launch failure",
            "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
        ),
        (
            "RuntimeError: CUDA error: unknown error",
            "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
        ),
    ],
)
def test_a_gpu_fault_after_which_the_gpu_cannot_be_used_takes_the_node_out(
    fault: str, dead: str
) -> None:
    got = decided(*STEPS, fault, dead)
    assert verdict(got) == ("gpu_hardware", "restart_excluding_node")
    assert "did not recover" in str(got["explanation"])


def test_a_first_launch_failure_alone_still_restarts_in_place() -> None:
    got = decided(*STEPS, "RuntimeError: CUDA error: unspecified launch failure")
    assert verdict(got) == ("gpu_hardware", "restart")


@pytest.mark.parametrize(
    "line",
    [
        "EE1002: Stream synchronize timeout. rtDeviceSynchronize execute failed, "
        "reason=[stream sync timeout]",
        "[Error]: In the specified timeout waiting event, all tasks in the specified stream are "
        "not completed.",
        "EE9999: The error from device(chipId:1, dieId:0), event wait timeout occurred during "
        "task execution, stream_id:12, timeout=1980.",
        "EI9999: The error from device(chipId:0, dieId:0), hccl fftsplus task timeout occurred "
        "during task execution, stream_id:4, timeout:1836.",
    ],
)
def test_a_runtime_timing_out_on_its_tasks_after_training_ran_restarts(line: str) -> None:
    got = decided(*STEPS, line)
    assert verdict(got) == ("nccl_timeout_hang", "restart")
    assert got["kind"] == "hang"


def test_an_hccl_task_timeout_while_the_data_is_preprocessed_stops() -> None:
    got = decided(
        '  File "train.py", line 80, in build_dataset',
        '    with training_args.main_process_first(desc="pre-process dataset"):',
        "RuntimeError: npuSynchronizeDevice:NPUStream.cpp:363 NPU error, error code is 107020",
        "EI9999: The error from device(chipId:0, dieId:0), hccl fftsplus task timeout occurred "
        "during task execution, stream_id:4, timeout:1836.",
    )
    assert verdict(got) == ("nccl_timeout_hang", "stop")
    assert got["attribution"] == "application"


def test_an_npu_error_code_defers_to_the_vendor_line_that_says_what_failed() -> None:
    got = decided(
        *STEPS,
        "RuntimeError: NPU function error: aclrtMalloc, NPU error, error code is 207018",
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.00 GiB total)",
    )
    assert verdict(got) == ("cuda_oom", "stop")


@pytest.mark.parametrize(
    "line",
    [
        "EI0006: [PID: 42] Getting socket times out. Reason: Remote Rank did not send the data "
        "in time. Please check the reason for the rank being stuck",
        "[rank3]: EI0006: remote rank did not send the data in time (tag 7, peer 5)",
    ],
)
def test_an_hccl_collective_waiting_on_a_peers_data_after_training_ran_restarts(
    line: str,
) -> None:
    got = decided(
        *STEPS,
        "RuntimeError: InnerRunOpApi:OpParamMaker.cpp:281 OPS function error: HcclAllgather, "
        "error code is 6",
        line,
    )
    assert verdict(got) == ("nccl_timeout_hang", "restart")
    assert got["kind"] == "hang"


def test_an_operators_error_code_alone_is_still_a_failure() -> None:
    got = decided(
        *STEPS,
        "RuntimeError: InnerRunOpApi:OpParamMaker.cpp:281 OPS function error: HcclBroadcast, "
        "error code is 4",
    )
    assert got["kind"] == "crash"
    assert got["category"] == "application_error"


def test_a_stream_that_synchronizes_in_time_stays_benign() -> None:
    got = decided(*STEPS, "[INFO] RUNTIME stream synchronize finished in 0.02 s, timeout 1836 s")
    assert verdict(got) == ("benign", "none")


@pytest.mark.parametrize(
    "line",
    [
        "F0101 pjrt_computation_client.cc:487] Non-OK-status: INTERNAL: Core halted "
        "unexpectedly: INTERNAL: Accelerator device halted prematurely, perhaps due to an "
        "on-device check-failure. HLO: fusion.7",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: RuntimeUnexpectedCoreHalt in HLO "
        "fused_conv1d_batched",
    ],
)
def test_a_tpu_core_halted_by_its_programs_check_stops(line: str) -> None:
    got = decided(*STEPS, line)
    assert verdict(got) == ("application_error", "stop")
    assert got["attribution"] == "system_software"


def test_tpu_cores_halted_for_a_shutdown_stay_benign() -> None:
    got = decided(*STEPS, "I0101 tpu_runtime.cc:120] Halting TPU cores for a clean shutdown.")
    assert verdict(got) == ("benign", "none")


@pytest.mark.parametrize(
    "line",
    [
        "Memory access fault by GPU node-2 (Agent handle: 0x55d0) on address 0x7f1c00000000. "
        "Reason: Page not present or supervisor privilege.",
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
        "beyond the largest legal address.",
    ],
)
def test_a_rocm_memory_access_fault_reads_as_an_illegal_address(line: str) -> None:
    # A first illegal address is restarted: it can be a passing fault.
    assert verdict(decided(*STEPS, line)) == ("application_error", "restart")


@pytest.mark.parametrize(
    "line",
    [
        "(TrainWorker pid=7) logging.cc:97: Unhandled exception: N3c105ErrorE. what(): "
        "Collective call returned error",
        "[ERROR] 2024-05-21-11:57:54 (PID:92, Device:3, RankID:3) ERR02200 DIST call hccl api "
        "failed.",
    ],
)
def test_a_vendor_collective_call_that_failed_is_the_networks(line: str) -> None:
    got = decided(*STEPS, line)
    assert verdict(got) == ("interconnect_network", "restart")


def test_an_xla_rendezvous_whose_peer_went_away_restarts_and_is_no_start_up() -> None:
    got = decided(
        *STEPS,
        "E tf_logging.cc:11] Failed to meet rendezvous 'torch_xla.core.xla_model.save': "
        "Socket closed (14)",
        "E tf_logging.cc:11] Failed to meet rendezvous 'epoch_end': Connection reset by peer",
    )
    assert verdict(got) == ("node_or_process_failure", "restart")
    assert "before the first training step" not in str(got["explanation"])


@pytest.mark.parametrize(
    "line",
    [
        "Detected inf/nan during batch_number=12",
        "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
    ],
)
def test_a_nan_detector_that_fires_stops(line: str) -> None:
    assert verdict(decided(*STEPS, line)) == ("numerical_divergence", "stop")


def test_a_skipped_fp16_step_stays_benign() -> None:
    got = decided(
        *STEPS, "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
    )
    assert verdict(got) == ("benign", "none")


def test_a_retry_exceeded_completion_with_no_peer_restarts_and_names_no_host() -> None:
    got = decided(*STEPS, "Got completion with error 12, opcode 1, len 4096, vendor err 129")
    assert verdict(got) == ("interconnect_network", "restart")
    assert got["implicated_hosts"] == []


def test_a_verbs_retry_exceeded_status_restarts() -> None:
    got = decided(*STEPS, "ucp: Failed status IBV_WC_RETRY_EXC_ERR on queue pair 0x1c2")
    assert verdict(got) == ("interconnect_network", "restart")


def test_a_protection_error_completion_with_no_peer_stops() -> None:
    got = decided(*STEPS, "Got completion with error 4, opcode 21394, len 0, vendor err 81")
    assert verdict(got) == ("interconnect_network", "stop")


def test_a_completion_without_error_stays_benign() -> None:
    got = decided(*STEPS, "NET/IB : completion queue polled: 32 completions, no errors")
    assert verdict(got) == ("benign", "none")


def test_a_stream_timeout_setting_printed_at_start_stays_benign() -> None:
    got = decided("[INFO] RUNTIME stream sync timeout set to 1836 s", *STEPS)
    assert verdict(got) == ("benign", "none")


# An expert-parallel library's dispatch or combine that waits for its peers' tokens past its
# timeout hangs like a collective; the cause is another rank or the fabric.


@pytest.mark.parametrize(
    "line",
    [
        "[rank17]: RuntimeError: DeepEP error: timeout (combine CPU)",
        "DeepEP dispatch NVL receiver timeout, channel: 3, RDMA: 0, nvl: 2, src NVL: 5",
        "DeepEP combine forwarder timeout (RDMA check), channel: 7, RDMA: 1, nvl: 4",
    ],
)
def test_an_expert_dispatch_that_times_out_after_training_ran_restarts_as_a_hang(
    line: str,
) -> None:
    got = decided(*STEPS, line)
    assert verdict(got) == ("nccl_timeout_hang", "restart")
    assert got["kind"] == "hang"


def test_an_expert_dispatch_that_completes_stays_benign() -> None:
    got = decided(*STEPS, "DeepEP dispatch done in 0.8 ms (timeout 100 s), 4096 tokens")
    assert verdict(got) == ("benign", "none")


# A vendor collective library refusing how the program calls it: the same code is refused again.


@pytest.mark.parametrize(
    "line",
    [
        "[10:01:02][node3][77][ERR][BKCL][p2p.cpp:210] BKCL does not support recv from one "
        "peer twice in one group",
        "[ERR][BKCL][bkcl.cpp:88] bkcl_all_reduce: datatype not supported for this op",
        "OSError: (External) BKCL error(1), BKCL_INVALID_ARGUMENT.",
    ],
)
def test_a_collective_library_refusing_the_programs_calls_stops(line: str) -> None:
    assert verdict(decided(*STEPS, line)) == ("application_error", "stop")


def test_bkcl_debug_lines_about_its_groups_stay_benign() -> None:
    got = decided(
        "[DBG][BKCL][init.cpp:1394] myrank 2, recv 0 from 1, send 4096 to 3",
        "[WARN][BKCL][globals.cpp:51] set BKCL timeout to 600 seconds",
        *STEPS,
    )
    assert verdict(got) == ("benign", "none")


# An abort that says only "failed or timed out", after NCCL's socket layer returned errors and
# with no collective timing out: the collectives failed on the network, they did not hang.

_ABORT = (
    "[rank2]:[E101 10:00:00.1 ProcessGroupNCCL.cpp:684] [Rank 2] Some NCCL operations have "
    "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
    "operations might run on corrupted/incomplete data."
)


def test_socket_layer_errors_before_an_abort_are_the_networks_and_restart() -> None:
    got = decided(
        *STEPS,
        "gpu-a:1201:1300 [2] NCCL INFO misc/socket.cc:540 -> 6",
        "gpu-a:1201:1300 [2] NCCL INFO socket.cc:47 -> 6",
        _ABORT,
    )
    assert verdict(got) == ("interconnect_network", "restart")
    assert got["kind"] == "crash"


def test_an_abort_after_a_collective_timed_out_is_still_a_hang() -> None:
    got = decided(
        *STEPS,
        "gpu-a:1201:1300 [2] NCCL INFO misc/socket.cc:540 -> 6",
        "[rank2]:[E101 10:00:00.0 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=90, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
        "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        _ABORT,
    )
    assert verdict(got) == ("nccl_timeout_hang", "restart")


def test_a_socket_trace_returning_success_is_not_an_error() -> None:
    got = decided(*STEPS, "gpu-a:1201:1300 [2] NCCL INFO misc/socket.cc:540 -> 0")
    assert verdict(got) == ("benign", "none")
