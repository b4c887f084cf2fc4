"""Every failure family the built-in tables recognise, with the role and grade its real text
gets: the line as the tool prints it (driver, kernel, NCCL, PyTorch, Slurm, PBS, PALS, DeepSpeed,
Megatron, NVRx), the signature that takes it, and whether it puts the fault on a node."""

from __future__ import annotations

import pytest

from detection.core.constants import Role
from detection.core.diagnosis import diagnose_lines
from detection.core.signatures import MatchGroup, scan_lines
from fleet.core.taxonomy import Category

C = Category
NODE, NOT_NODE = True, False

FAMILIES = [
    # GPU hardware and its driver
    (
        "NVRM: Xid (PCI:0000:10:1c): 64, pid=1850, Row Remapper: row remapping failure",
        "nvrm_xid",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "NVRM: _kgspLogRpcTimeout: GSP RPC timeout after 45 seconds",
        "gpu_gsp_timeout",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
        "pcie_aer_fatal",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "nv-fabricmanager[2041]: fabric manager failed to initialize NVSwitch",
        "fabric_manager_error",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
        "status=1/FAILURE",
        "fabric_manager_error",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 55 egress non-posted"
        " PRIV error (First)",
        "nvswitch_sxid",
        C.GPU_HARDWARE,
        NOT_NODE,
    ),
    (
        "gpu46:78367:78492 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'",
        "nvswitch_error",
        C.GPU_HARDWARE,
        NODE,
    ),
    ("RuntimeError: CUDA error: unknown error", "gpu_cuda_unknown_error", C.GPU_HARDWARE, NODE),
    (
        "RuntimeError: CUDA error: unspecified launch failure",
        "cuda_launch_failure",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "Second rerun: unexpected result is not reproducible on a different GPU, therefore was"
        " likely incorrect",
        "rerun_persistent_error",
        C.GPU_HARDWARE,
        NODE,
    ),
    ("Possible transient error!", "rerun_transient_error", C.GPU_HARDWARE, NOT_NODE),
    # the fabric
    (
        "node-3:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local"
        " catastrophic error",
        "ib_async_event",
        C.INTERCONNECT_NETWORK,
        NODE,
    ),
    # A verbs set-up call refused is how the fabric is set up for the job; a verbs call failing
    # on a running queue pair is the node's HCA or link.
    (
        "dgx-3:1:2 [0] NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable",
        "ib_setup_refused",
        C.INTERCONNECT_NETWORK,
        NOT_NODE,
    ),
    (
        "dgx-3:1:2 [0] NCCL WARN Call to ibv_poll_cq failed with error 5",
        "ibverbs_call_failed",
        C.INTERCONNECT_NETWORK,
        NODE,
    ),
    (
        "node7:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4242> with status=4 "
        "opcode=0 len=0 vendor err 81",
        "ib_access_error",
        C.INTERCONNECT_NETWORK,
        NOT_NODE,
    ),
    (
        "W0101 ip-10-0-0-1:1:2 [2] misc/shmutils.cc:113 NCCL WARN Error while creating shared "
        "memory segment /dev/shm/nccl-uc5H5q (size 9637888)",
        "nccl_shm_setup_failed",
        C.INTERCONNECT_NETWORK,
        NOT_NODE,
    ),
    (
        "The node was low on resource: memory. Container pytorch was using 61Gi, which exceeds "
        "its request of 0.",
        "pod_evicted",
        C.NODE_OR_PROCESS_FAILURE,
        NOT_NODE,
    ),
    (
        "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by "
        "subset of ranks and are waiting for remainder of ranks for more than 60 seconds.",
        "horovod_stall",
        C.NCCL_TIMEOUT_HANG,
        NOT_NODE,
    ),
    (
        "WARNING worker.py:1462 -- The node with node id: 8f205b12 and ip: 10.128.0.103 has "
        "been marked dead because the detector has missed too many heartbeats from it.",
        "ray_node_dead",
        C.NODE_OR_PROCESS_FAILURE,
        NODE,
    ),
    (
        "shape '[1]' is invalid for input of size 2",
        "shape_invalid",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    (
        "OSError: Unable to open file (unable to lock file, errno = 11, error message = "
        "'Resource temporarily unavailable')",
        "storage_write_failed",
        C.FILESYSTEM_IO,
        NOT_NODE,
    ),
    (
        "1d:00.0 VGA compatible controller: NVIDIA Corporation TU102GL [Quadro RTX 6000/8000] "
        "(rev ff)",
        "gpu_fallen_off_bus",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "         Link 3: <inactive>",
        "nvlink_inactive",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset "
        "required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c",
        "gpu_reset_required",
        C.GPU_HARDWARE,
        NODE,
    ),
    (
        "srun: error: Task launch for 23.0 failed on node gpu-12: Job prolog failed",
        "slurm_node_launch_failed",
        C.NODE_OR_PROCESS_FAILURE,
        NODE,
    ),
    (
        "RuntimeError: unexpected EOF, expected 4859355 more bytes. The file might be corrupted.",
        "checkpoint_archive_broken",
        C.FILESYSTEM_IO,
        NOT_NODE,
    ),
    (
        "[E socket.cpp:435] [c10d] The server socket has failed to listen on any local network "
        "address.",
        "address_in_use",
        C.INTERCONNECT_NETWORK,
        NOT_NODE,
    ),
    # CUDA from the application
    (
        "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block:"
        " [0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.",
        "cuda_device_assert",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    # filesystems
    (
        "OSError: [Errno 30] Read-only file system: '/ckpt/step_900'",
        "fs_read_only",
        C.FILESYSTEM_IO,
        NOT_NODE,
    ),
    (
        "RuntimeError: File my_out/checkpoints/checkpoint_0.pt cannot be opened.",
        "checkpoint_unwritable",
        C.FILESYSTEM_IO,
        NOT_NODE,
    ),
    (
        "[Sat Mar  4 04:10:52 2023]  cxiWaitEventWait+0x208/0x330 [mmfslinux]",
        "hung_task_in_filesystem",
        C.FILESYSTEM_IO,
        NOT_NODE,
    ),
    # hosts, launchers and schedulers
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=5047.batch. Some of the step tasks"
        " have been OOM Killed.",
        "slurm_oom_kill",
        C.NODE_OR_PROCESS_FAILURE,
        NOT_NODE,
    ),
    (
        "RuntimeError: DataLoader worker (pid 30882) is killed by signal: Bus error. It is possible"
        " that dataloader's workers are out of shared memory.",
        "dataloader_shm_bus_error",
        C.NODE_OR_PROCESS_FAILURE,
        NOT_NODE,
    ),
    (
        "salloc: error: Node failure on worker-1",
        "slurm_node_failure_named",
        C.NODE_OR_PROCESS_FAILURE,
        NODE,
    ),
    ("job preempted (node failure)", "pbs_node_failure", C.NODE_OR_PROCESS_FAILURE, NODE),
    (
        "02/23/2020 00:01:32  S    unable to run job, send to MOM '11.11.11.2' failed",
        "pbs_node_failure",
        C.NODE_OR_PROCESS_FAILURE,
        NODE,
    ),
    (
        "x4117c0s6b0n0.hsn.cm.aurora.alcf.anl.gov: shepherd died from signal 9",
        "pals_node_failure",
        C.NODE_OR_PROCESS_FAILURE,
        NODE,
    ),
    (
        "[Wed Sep 26 00:30:18 2018] INFO: task python:19772 blocked for more than 120 seconds.",
        "hung_task",
        C.NODE_OR_PROCESS_FAILURE,
        NOT_NODE,
    ),
    ("Killed", "process_killed_bare", C.NODE_OR_PROCESS_FAILURE, NOT_NODE),
    # configuration and code
    (
        "RuntimeError: Error(s) in loading state_dict for DTNet:",
        "state_dict_mismatch",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    (
        "/root/miniconda3/bin/python: can't open file '/root/R1-V/src/open_r1/grpo.py': [Errno 2]"
        " No such file or directory",
        "script_not_found",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    (
        "ImportError: /usr/lib/python3/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-"
        "gnu.so: undefined symbol: _ZN3c105ErrorC2E",
        "undefined_symbol",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    (
        "Key 'period' not in 'ModelCheckpointConf'",
        "config_key_missing",
        C.APPLICATION_ERROR,
        NOT_NODE,
    ),
    # numerical divergence
    (
        "Correct result (but possible Application error)",
        "rerun_correct_result",
        C.NUMERICAL_DIVERGENCE,
        NOT_NODE,
    ),
    (
        "[2024-01-01 00:00:00] [INFO] [fused_optimizer.py:344:_update_scale] Current loss scale"
        " already at minimum - cannot decrease scale anymore. Exiting run.",
        "loss_scale_at_minimum",
        C.NUMERICAL_DIVERGENCE,
        NOT_NODE,
    ),
]


def only(lines: list[str]) -> MatchGroup:
    groups = scan_lines(lines).groups
    assert len(groups) == 1, groups
    return groups[0]


@pytest.mark.parametrize(
    ("line", "signature", "category", "node_local"), FAMILIES, ids=[f[1] for f in FAMILIES]
)
def test_each_family_is_recognised_and_graded(
    line: str, signature: str, category: Category, node_local: bool
) -> None:
    group = only([line])
    assert (group.signature, group.category, group.role, group.implicates_node) == (
        signature,
        category,
        Role.INITIATING,
        node_local,
    )


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        (
            "[rank3]:[E909 09:55:46.996672294 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg)"
            " Rank 3] Timeout at NCCL work: 2070, last enqueued NCCL work: 2082",
            "nccl_watchdog_timeout",
        ),
        ("  Communicator ranks have different AllGather operation counts", "nccl_watchdog_timeout"),
        (
            "[2021-11-21 08:32:07,148] [INFO] [launch.py:131:sigkill_handler] Killing"
            " subprocess 250621",
            "launcher_killing_children",
        ),
        (
            "x4115c5s4b0n0.hsn.cm.aurora.alcf.anl.gov: rank 12 died from signal 15",
            "launcher_killing_children",
        ),
        (
            "Unexpected result tensor(nan) on rank 0 at iteration #150 invocation #1",
            "rerun_unexpected_result",
        ),
    ],
)
def test_what_follows_a_failure_elsewhere_is_a_cascade(line: str, signature: str) -> None:
    group = only([line])
    assert (group.signature, group.role) == (signature, Role.CASCADE)


@pytest.mark.parametrize(
    "line",
    [
        "/usr/bin/rm: cannot remove '/usr/local/cuda/compat/lib': Read-only file system",
        "pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0",
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)",
        "slurmstepd: error: *** STEP 4200.0 ON gpu-1 CANCELLED AT 2026-11-29T12:01:05 DUE TO JOB"
        " REQUEUE ***",
    ],
)
def test_noise_and_corrected_events_never_initiate(line: str) -> None:
    assert all(group.role is not Role.INITIATING for group in scan_lines([line]).groups)


def test_a_straggler_warning_names_every_affected_rank() -> None:
    group = only(
        [
            "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected"
            " ranks: [76, 13, 45]"
        ]
    )
    assert (group.category, group.ranks) == (Category.STRAGGLER, (13, 45, 76))


def test_an_xid_whose_immediate_action_is_to_restart_the_app_is_its_own_variant() -> None:
    group = only(["NVRM: Xid (PCI:0000:3b:00): 31, pid=1, MMU Fault: ENGINE GRAPHICS"])
    assert (group.signature, group.category) == ("nvrm_xid_application", C.APPLICATION_ERROR)


def test_the_layout_lines_place_ranks_and_flag_nothing() -> None:
    result = scan_lines(
        [
            "gpu-12:815:864 [3] NCCL INFO comm 0x55d0c3a0 rank 11 nranks 16 cudaDev 3 - Init",
            "  Rank=76 Node=h100-001-253-012 Score=0.94",
            "Exec host:  gpu-2-17/5+gpu-2-18/0",
        ]
    )
    assert result.groups == ()
    assert set(result.placements) == {
        (11, "gpu-12"),
        (76, "h100-001-253-012"),
        (None, "gpu-2-17"),
        (None, "gpu-2-18"),
    }


def test_a_link_that_went_down_names_the_node_only_when_the_collectives_then_fail() -> None:
    down = "[ 812.5] mlx5_core 0000:19:00.0 mlx5_0: Port: 1 Link DOWN"
    group = only([down])
    assert (group.signature, group.role, group.implicates_node) == (
        "ib_link_down",
        Role.CONTEXT,
        True,
    )
    timeouts = [
        f"[rank{r}]:[E321 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective"
        f" operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600060 ms"
        for r in range(4)
    ]
    hung = diagnose_lines([down, *timeouts], host_hints=["gpu-3", *[None] * 4])
    assert (hung.category, hung.node_local, hung.hosts) == (
        Category.INTERCONNECT_NETWORK,
        True,
        ("gpu-3",),
    )
    flap = diagnose_lines([down, down.replace("DOWN", "ACTIVE")], host_hints=["gpu-3"] * 2)
    assert not flap.is_failure


@pytest.mark.parametrize(
    "line",
    [
        "[3835060.9] watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [python3:4711]",
        "[ 8121.3] NMI watchdog: Watchdog detected hard LOCKUP on cpu 5",
        "[ 9001.7] rcu: INFO: rcu_sched self-detected stall on CPU",
    ],
)
def test_a_cpu_lockup_names_its_node_when_the_job_then_hangs(line: str) -> None:
    group = only([line])
    assert (group.signature, group.role, group.implicates_node) == (
        "cpu_lockup",
        Role.CONTEXT,
        True,
    )
    assert not diagnose_lines([line], host_hints=["gpu-7"]).is_failure  # a brief lockup passes
    timeouts = [
        f"[rank{r}]:[E321 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective"
        f" operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600060 ms"
        for r in range(4)
    ]
    hung = diagnose_lines([line, *timeouts], host_hints=["gpu-7", *[None] * 4])
    assert (hung.category, hung.node_local, hung.hosts) == (
        Category.NODE_OR_PROCESS_FAILURE,
        True,
        ("gpu-7",),
    )


def test_a_dead_fabric_manager_is_the_nodes_software_and_a_failed_nvswitch_its_hardware() -> None:
    service = only(["systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'."])
    switch = only(["NVSwitch 2 fatal error detected on link 7"])
    assert (service.attribution, switch.attribution) == ("system_software", "hardware")
    assert service.implicates_node and switch.implicates_node
