"""Built-in signatures of the hardware and the fabric: GPUs and their driver, NVLink, PCIe, the
fabric manager, and the InfiniBand/RoCE network as NCCL and the kernel report it.

Node-local evidence (the node must be taken out) is graded after the vendors' catalogues: NVIDIA's
Xid catalogue (``xid.py``), the driver's own reset and GSP messages, the kernel's AER severities,
and the HCA's async events. Consequences (a peer that went away) are cascades.
"""

from __future__ import annotations

from detection.core.signatures.entries import (
    HW_NODE,
    HW_NODE_ERROR,
    IB_CONFIG,
    NET_CASCADE,
    NET_ERROR,
    NET_NODE,
    SW_NODE,
    A,
    C,
    K,
    R,
    S,
    hint,
    sig,
)
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood, refine_ib, refine_xid

GPU = (
    sig(
        "nvrm_xid",
        r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)\n]{0,64})\):\s*(?P<xid>\d{1,4})",
        HW_NODE,
        "NVIDIA driver Xid event, graded by NVIDIA's Xid catalogue.",
        refine=refine_xid,
        # Codes whose immediate action is to restart the application (13, 31, 43 ...).
        variants=("application",),
    ),
    sig(
        "nvswitch_sxid",
        r"SXid \((?:PCI:)?(?P<pci>[^)\n]{0,64})\):\s*(?P<sxid>\d{1,6})",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, False, S.WARNING),
        "NVSwitch SXid event.",
    ),
    sig(
        "gpu_fallen_off_bus",
        r"(?i)fallen off the bus|GPU is lost\b|\bGPU lost\b"
        # lspci reads all ones from a device that no longer answers on the bus.
        r"|NVIDIA Corporation[^\n]*\(rev ff\)",
        HW_NODE,
        "The GPU disappeared from PCIe (Xid 79).",
        refine=flood,
    ),
    sig(
        "gpu_uncorrectable_ecc",
        r"(?i)uncorrectable ECC error|ECC_UNCORRECTABLE|double bit ECC|\bDBE\b[^\n]{0,40}error",
        HW_NODE,
        "Uncorrectable GPU memory error.",
    ),
    sig(
        "gpu_row_remap_failure",
        r"(?i)row remap(?:ping|per)? failure|Remapping Failure Occurred\s*:\s*Yes"
        r"|RETIRED_PAGES_PENDING|pending page retirement",
        HW_NODE,
        "The GPU could not remap a failing memory row (or retire a page): it needs a reset.",
    ),
    sig(
        "gpu_nvlink_error",
        r"(?i)uncorrectable NVLink error|NVLink[^\n]{0,80}\b(?:fatal|uncorrectable)\b"
        r"|nvlink[^\n]{0,40}link (?:is )?down",
        HW_NODE,
        "Uncorrectable NVLink error.",
    ),
    sig(
        "gpu_gsp_timeout",
        r"NVRM:[^\n]{0,120}(?:Heartbeat timed out|GSP Timeout|_kgspLogRpcTimeout"
        r"|GSP RPC timeout|Memory Subsystem Error detected"
        # The driver can no longer hand RPCs to the GSP firmware, or hear back from it.
        r"|rpcSendMessage failed|GspRmFree failed|Timeout waiting for RPC from GSP"
        r"|(?i:GSP RM heartbeat timed out))",
        HW_NODE,
        "The GPU's system processor (GSP) stopped answering: the GPU needs a reset.",
        refine=flood,
    ),
    sig(
        "gpu_reset_required",
        r"(?i)GPU (?:requires|needs) (?:a )?reset|\bGPU Reset Required\b|Node Reboot Required"
        r"|RmInitAdapter failed|reset gpu to activate|NV_ERR_RESET_REQUIRED",
        HW_NODE_ERROR,
        "The driver says the GPU needs a reset or the node a reboot.",
    ),
    sig(
        "pcie_aer_fatal",
        r"AER: (?:Uncorrected|Uncorrectable) \((?:Fatal|Non-Fatal)\) error"
        r"|PCIe Bus Error: severity=(?:Uncorrected|Uncorrectable|Fatal)",
        HW_NODE_ERROR,
        "An uncorrectable PCIe error (AER) on the node.",
        refine=flood,
    ),
    sig(
        "pcie_aer_corrected",
        r"AER: Corrected error|PCIe Bus Error: severity=Corrected",
        hint(C.GPU_HARDWARE, A.HARDWARE),
        "A corrected PCIe error: logged and fixed by the hardware.",
    ),
    sig(
        "fabric_manager_mismatch",
        r"(?i)fabric ?manager[^\n]*(?:don't|do not|doesn't|does not) match"
        r"|fabric ?manager[^\n]*version mismatch",
        classify(K.CRASH, C.GPU_HARDWARE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "The fabric manager and the GPU driver are of different versions: the node image is "
        "inconsistent, on every node built from it.",
    ),
    sig(
        "fabric_manager_error",
        r"(?i)fabric ?manager[^\n]{0,120}(?:fail|error|not running|timed out|could not)"
        r"|nv-fabricmanager[^\n]{0,80}(?:fail|error)",
        SW_NODE,
        "The node's fabric manager service failed: its GPUs cannot use NVSwitch until it is "
        "restarted.",
    ),
    sig(
        "nvswitch_error",
        r"NVLS multicast support is not available"
        r"|transport/nvls\.cc[^\n]{0,80}NCCL WARN Cuda failure"
        # "non-fatal" is not "fatal": the fabric manager logs and recovers those.
        r"|NVSwitch[^\n]{0,80}[ :(](?:fatal|uncorrectable)|NVSwitch[^\n]{0,80}error detected",
        HW_NODE_ERROR,
        "The NVSwitch fabric failed (NVLink SHARP and multi-node NVLink need it).",
    ),
    sig(
        "gpu_thermal_slowdown",
        # DCGM's health watch or the driver: a GPU's clocks pulled down because it overheats
        # (a fan or its cooling failed). Every synchronous step waits for it; power capping,
        # which the operator sets, is not this.
        r"(?i)clocks? (?:event|throttl\w*)s? due to thermal violation"
        r"|thermal violation in GPU \d|HW Thermal Slowdown\s*:\s*Active",
        classify(K.STRAGGLER, C.STRAGGLER, A.HARDWARE, R.INITIATING, True, S.ERROR),
        "A GPU of the node is throttled by overheating: it slows every rank that waits for it.",
        refine=flood,
    ),
    sig(
        "gpu_unavailable",
        r"CUDA-capable device\(s\) is/are busy or unavailable"
        r"|all CUDA-capable devices are busy or unavailable|cudaErrorDevicesUnavailable"
        r"|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        r"|no CUDA-capable device is detected",
        classify(K.CRASH, C.GPU_HARDWARE, A.SYSTEM_SOFTWARE, R.INITIATING, True, S.ERROR),
        "A GPU of the node cannot be used.",
    ),
    sig(
        "nvlink_inactive",
        r"^\s*Link \d{1,2}: <inactive>|(?i:all (?:nv)?links are inactive)"
        r"|(?i:nvlink[^\n]*(?:links? (?:is|are) (?:inactive|down)))",
        HW_NODE_ERROR,
        "NVLink links of a GPU are inactive: the GPU talks to its peers over PCIe, or not at all.",
        refine=flood,
    ),
    sig(
        "row_remap_pending",
        r"^\s*Pending(?: Page Blacklist| Page Retirement)?\s*:\s*Yes\s*$",
        HW_NODE_ERROR,
        "A GPU memory row (or page) retirement is pending: the GPU needs a reset to use it, "
        "and until then the faulty row is live.",
    ),
    sig(
        "gpu_handle_lost",
        r"Unable to determine the device handle for GPU",
        HW_NODE_ERROR,
        "NVML cannot reach one of the node's GPUs (it fell off the bus or hangs).",
        refine=flood,
    ),
    sig(
        "gpu_cuda_unknown_error",
        r"CUDA error: unknown error|cudaErrorUnknown|\(error code unknown error\)"
        r"|CUDA_ERROR_UNKNOWN|Cuda failure 999\b",
        HW_NODE_ERROR,
        "CUDA reports an unknown error: the GPU (or its driver) failed under the job.",
    ),
    sig(
        "cuda_launch_failure",
        r"(?i)unspecified launch failure|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED",
        HW_NODE_ERROR,
        "A kernel crashed without an application cause: a GPU fault unless shown otherwise.",
    ),
    sig(
        "rerun_persistent_error",
        r"Possible persistent error!|unexpected result is not reproducible on a different GPU",
        HW_NODE,
        "A re-run on another GPU did not reproduce the result: the first GPU is faulty.",
    ),
    sig(
        "rerun_transient_error",
        r"Possible transient error!",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, False, S.ERROR),
        "A re-run on the same GPU did not reproduce the result: a transient fault.",
    ),
)

NETWORK = (
    sig(
        "c10d_wait_timed_out",
        r"\[c10d\] waitForInput: socket [^\n]* timed out after \d{1,12} ?ms",
        NET_ERROR,
        "A c10d socket waited for its peer until the timeout: the other side never answered.",
        refine=flood,
    ),
    sig(
        "rendezvous_keepalive_lost",
        r"failed to send a keep-alive heartbeat to the rendezvous[^\n]*"
        r"Rendezvous(?:Connection|Closed)Error",
        # A running agent that cannot reach the store at all (not merely a slow answer, which
        # it retries) has lost the store's host: the job's ranks can no longer agree.
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "A running agent lost its connection to the rendezvous store (its host went away).",
        refine=flood,
    ),
    sig(
        "c10d_warning",
        r"^\[W[^\]\n]*\] \[c10d\]"
        r"|has failed to send a keep-alive heartbeat to the rendezvous",
        hint(C.INTERCONNECT_NETWORK),
        "A warning of the c10d store or the rendezvous: it retries; what fails after it says why.",
    ),
    # Set-up calls refused and protection or access errors: how the fabric is configured for
    # the job (GID index, GPUDirect RDMA, ACS, a plugin or library version), not a broken link.
    sig(
        "ib_setup_refused",
        r"Call to ibv_(?:modify_qp|create_qp|reg_mr\w{0,10}|reg_dmabuf_mr|open_device) failed"
        r"(?: with (?:error )?(?P<ibverr>[^\n]+))?",
        IB_CONFIG,
        "An InfiniBand verbs set-up call (a queue pair, a memory registration) was refused: the "
        "fabric is not configured for what NCCL asks of it.",
        refine=flood,
    ),
    sig(
        "ofi_provider_setup_failed",
        # The libfabric provider under NCCL (AWS EFA through aws-ofi-nccl) refusing its set-up:
        # an address vector, domain, endpoint or protection domain it cannot open or allocate.
        r"NET/OFI (?:Couldn't (?:open|allocate|create) (?:an? )?(?:AV|address vector|domain"
        r"|endpoint|CQ|completion queue|fabric)|Creating new endpoint for domain \S+ failed"
        r"|aws-ofi-nccl initialization failed)"
        r"|(?:infiniband )?efa_\d+: Failed to (?:allocate pd|process command ALLOC_PD)",
        IB_CONFIG,
        "The libfabric provider (EFA) refused to set up the resources NCCL asks of it: the "
        "driver, the plugin or the instance's network set-up, the same on every rank.",
        refine=flood,
    ),
    sig(
        "ib_qp_connect_timeout",
        # Queue pairs that could not be connected in time (a platform's event for NCCL's QP
        # set-up, RDMA CM): the peer or the path did not answer, no host is singled out.
        r"(?i:(?:\b|_)qp[ _]conn(?:ect(?:ion)?)?[ _](?:timeout|timed[ _]out))"
        r"|RDMA_CM_EVENT_(?:UNREACHABLE|CONNECT_ERROR)",
        NET_ERROR,
        "InfiniBand/RoCE queue pairs could not be connected to their peer in time.",
        refine=flood,
    ),
    sig(
        "ib_access_error",
        r"(?:NET/IB\w* ?: ?)?Got completion (?:from peer [^\s<,]+(?:<\d+>)? )?with "
        r"(?:error |status=)(?:4|9|10|11)\b"
        r"|(?i:local access violation|local protection error|remote access error)",
        IB_CONFIG,
        "An InfiniBand protection or access error: memory registration or RDMA is not set up "
        "for the job (GPUDirect RDMA, ACS, IOMMU, a plugin).",
        refine=flood,
    ),
    sig(
        "nccl_ib_completion_error",
        r"NET/IB\w* ?: ?Got completion from peer (?P<peer>[^\s<,]{1,200})(?:<\d+>)?"
        r" with (?:error (?P<ibstatus>\d+)|status=(?P<ibstatus2>\d+))",
        NET_NODE,
        "InfiniBand/RoCE work completion error (status 12: transport retry counter exceeded).",
        refine=refine_ib,
    ),
    sig(
        "ib_completion_error",
        # A work completion error that names no peer (older NCCL, other verbs users): between
        # two nodes, it singles neither out.
        r"Got completion with error (?P<ibstatus>\d{1,3}), opcode \d+"
        r"|IBV_WC_RETRY_EXC_ERR|(?i:transport retry counter exceeded)",
        NET_ERROR,
        "InfiniBand/RoCE work completion error with no peer named (status 12: the transport "
        "retry counter ran out).",
        refine=refine_ib,
    ),
    sig(
        "ucx_transport_retry_exceeded",
        r"Transport retry count exceeded on [\w.-]{1,40}:\d{1,3}/(?:IB|RoCE)"
        r"|UCX[^\n]{0,80}(?:ERROR|error)[^\n]{0,80}transport retry count exceeded",
        # UCX's form of IBV_WC_RETRY_EXC_ERR: the remote side never acknowledged. Without a
        # port-down or HCA event on the node it is the path or the peer, not this host.
        NET_ERROR,
        "UCX (MPI, UCC) gave up resending over InfiniBand/RoCE: the peer or the fabric "
        "between them stopped answering.",
        refine=flood,
    ),
    sig(
        "ib_async_event",
        # NCCL names the device before the event in later versions ("mlx5_1:1 Got async
        # event", "Got async error event").
        r"NET/IB ?: ?(?:[\w.:-]{1,40} )?Got async (?:error )?event ?: ?"
        r"(?:local catastrophic error|port error"
        r"|device fatal|local work queue catastrophic error|QP fatal)",
        NET_NODE,
        "The HCA reported a fatal event (catastrophic error, port error).",
        refine=flood,
    ),
    sig(
        "ib_link_down",
        r"mlx5_core[^\n]{0,160}(?:(?i:link (?:is )?down)"
        r"|Port module event[^\n]{0,80}(?:unplugged|down)"
        r"|health recovery|device's health compromised|FW fatal error)"
        r"|\bib\d*: (?:link (?:becomes )?down|Link is Down)"
        r"|(?:mlx5_\d+|ibp\S+) port \d+ state (?:changed to )?DOWN"
        r"|NETDEV WATCHDOG: \S+ \([^)\n]{1,40}\): transmit queue \d+ timed out",
        # A link that goes down may come back before NCCL gives up: by itself no failure, but
        # it names the node when the collectives then fail or time out.
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CONTEXT, True, S.ERROR),
        "The node's InfiniBand/RoCE link or adapter went down.",
        refine=flood,
    ),
    sig(
        "ibverbs_call_failed",
        r"Call to ibv_(?:poll_cq|post_send|post_recv|get_async_event)"
        r" failed(?: with error (?P<ibverr>[^\n]{1,80}))?",
        NET_NODE,
        "An InfiniBand verbs call failed on this node (its HCA or link).",
        refine=flood,
    ),
    sig(
        "nccl_network_config",
        r"Bootstrap ?: ?no socket interface found|no socket interface found"
        r"|NET/Socket ?: ?No (?:usable )?(?:listening )?interface found"
        r"|NCCL_SOCKET_IFNAME[^\n]{0,80}(?:not found|invalid|no interface)"
        r"|NCCL_IB_HCA[^\n]{0,80}(?:not found|no device)",
        NET_ERROR,
        "NCCL cannot find the network interface it is configured to use.",
        refine=flood,
    ),
    sig(
        "connect_retrying",
        # A transport still retrying to connect or accept (NCCL's socket layer, the FastSocket
        # plugin): a failure only if no connection follows (``shape`` reads the one that does).
        r"Maximum retry reached for (?:accept|connect)\b"
        r"|(?i:\bconnect(?:ion)?\b[^\n]{0,160}\b(?:refused|timed out|unreachable)"
        r"[,;:]? retrying\b)",
        NET_CASCADE,
        "A connection between ranks is still being retried.",
        refine=flood,
    ),
    sig(
        "nccl_socket_error_trace",
        # NCCL's trace of an error returned through its socket layer: a socket between ranks
        # failed (reset, closed or refused), though its WARN line may be on another rank.
        r"NCCL INFO (?:misc/)?socket\.cc:\d{1,6} -> [1-9]\b",
        NET_CASCADE,
        "NCCL's socket layer returned an error (a connection between ranks failed).",
        refine=flood,
    ),
    sig(
        "nccl_remote_error",
        r"(?i)remote process exited or there was a network error|ncclRemoteError"
        r"|Connection closed by remote peer"
        r"|(?i:nccl|socket|\bnet\b|recv|send|store|c10d)[^\n]{0,200}(?:Connection reset by peer"
        r"|Broken pipe)"
        r"|NET/OFI [^\n]{0,200}completed with error",
        NET_CASCADE,
        "A peer went away; usually the consequence of a failure elsewhere.",
        refine=flood,
    ),
    sig(
        "nccl_system_error",
        r"unhandled system error|ncclSystemError",
        # NCCL's wrapper for whatever failed beneath it: a more specific line (an ibverbs call,
        # a shared-memory segment, a socket) is the cause where the excerpt has one.
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.WARNING),
        "NCCL system call (socket, memory) failure.",
    ),
    sig(
        "c10d_rendezvous_error",
        r"Rendezvous(?:Timeout|Connection|Closed|State)?Error",
        NET_ERROR,
        "torchrun rendezvous failed.",
    ),
    sig(
        "host_name_unresolvable",
        r"can't resolve '[^'\n]+': Name does not resolve|Name or service not known"
        r"|Temporary failure in name resolution|nodename nor servname provided",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "A host name (often the master's) does not resolve.",
        refine=flood,
    ),
    sig(
        "nccl_shm_setup_failed",
        r"Error while creating shared memory segment|posix_fallocate failed"
        r"|shmutils\.cc[^\n]*(?:fail|error)"
        # Its /dev/shm file cannot grow, or vanished under it (systemd's RemoveIPC).
        r"|failed to extend /dev/shm/|unlink shared memory /dev/shm/\S+ failed",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "NCCL cannot create its shared-memory segments (/dev/shm too small, as in a container "
        "with the default 64 MB).",
        refine=flood,
    ),
    sig(
        "address_in_use",
        r"errno: 98 - Address already in use|EADDRINUSE|\[Errno 98\]|Address already in use"
        r"|server socket has failed to listen on any local network address",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "The port the job's store or master listens on is already taken on that host.",
    ),
    sig(
        "nccl_collective_mismatch",
        r"collective mismatch error",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "Two ranks disagree on a collective's size: they run different code, settings or NCCL "
        "versions.",
        refine=flood,
    ),
    sig(
        "c10d_store_wait_timeout",
        # A store that answers but whose key no peer wrote in time: a rank stopped before its
        # part of an exchange (a stuck collective), not a store nobody reaches.
        r"DistStoreError: wait timeout after \d+ ?ms, keys?:",
        classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "A rank waited on the c10d store for a key its peer never wrote (the peer is stuck or "
        "gone).",
        refine=flood,
    ),
    sig(
        "process_group_connect_failed",
        # Gloo's, NCCL's bootstrap and JAX's coordination set-up: the ranks cannot connect.
        r"Gloo connectFullMesh failed|Call to connect failed ?: ?Connection (?:timed out|refused)"
        r"|DEADLINE_EXCEEDED: Barrier timed out[^\n]*PjRT_Client_Connect"
        r"|Barrier_id: PjRT_Client_Connect"
        # A task that cannot register with the coordination service (JAX, TensorFlow), and
        # the agent left in error by it; Ascend's HCCL building its links between ranks.
        r"|while calling /tensorflow\.CoordinationService/(?:RegisterTask|WaitForAllTasks)"
        r"|Coordination service agent in error status: (?:DEADLINE_EXCEEDED|UNAVAILABLE)"
        # The service's own side: its start-up barrier that every task must register at
        # timed out, and it stops (tasks that crashed, were never scheduled, or came late).
        r"|(?i:coordination service as cluster registration failed)"
        r"|Barrier timed out\.? [^\n]{0,40}\[Init\]Wait_for_all_tasks_to_register"
        # gRPC's own words for a coordinator nothing listens on (JAX's distributed client).
        r"|UNAVAILABLE: ?failed to connect to all addresses"
        r"|EI0006\b[^\n]*(?i:socket)|(?i:getting socket times out)"
        # c10d's store-based barrier of init_process_group: not every rank checked in.
        r"|Timed out initializing process group in store based barrier",
        IB_CONFIG,
        "The job's processes could not connect to one another while setting up their group "
        "(the interface, address or firewall between them).",
        refine=flood,
    ),
    sig(
        "store_barrier_waiting",
        # c10d's store-based barrier of init_process_group reports every 10 s that fewer
        # workers than the world size have checked in; a barrier that then completes was only
        # slow (``shape``), one that keeps waiting never will.
        r"Waiting in store based barrier to initialize process group for rank: \d{1,6}"
        r"[^\n]*\(world_size=\d{1,6}, (?:worker_count|num_workers_joined)=\d{1,6}",
        classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "Process-group start-up waits for ranks that never check in to its store (they were "
        "launched with another address, port or world size, or never started).",
        refine=flood,
    ),
    sig(
        "c10d_store_error",
        r"DistStoreError|DistNetworkError|client socket has timed out|connect\(\) timed out"
        r"|client socket has failed to connect to any network address"
        r"|TCPStore[^\n]{0,120}(?:timed out|timeout|failed|refused)|Socket Timeout",
        NET_ERROR,
        "The c10d key-value store (TCPStore) could not be reached.",
    ),
)
