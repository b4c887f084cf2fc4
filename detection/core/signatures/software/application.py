"""Built-in signatures of the application itself: configuration and code errors, and its own
Python exceptions."""

from __future__ import annotations

import dataclasses

from detection.core.signatures.entries import APP_ERROR, APP_FATAL, A, C, K, R, S, hint, sig
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood, refine_exception

_CONTAINER = classify(K.CRASH, C.APPLICATION_ERROR, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR)

APPLICATION = (
    sig(
        "container_start_failed",
        # The job's container could not be started (its entrypoint, Apptainer or Singularity,
        # an OCI runtime): its image or the runtime's configuration, which every node and
        # every retry meet alike.
        r"enroot-switchroot: failed to execute|(?i:OCI runtime (?:create|exec|start) failed)"
        r"|(?:apptainer|singularity|FATAL): +(?:container creation failed|could not open image"
        r"|while (?:creating|making) image)",
        dataclasses.replace(_CONTAINER, attribution=A.APPLICATION),
        "The job's container could not be started (its image, its entrypoint, or how the "
        "container runtime is configured).",
        refine=flood,
    ),
    sig(
        "container_import_failed",
        # pyxis's summary of a failed import or start: its log's own lines (a full disk, a
        # refused directory) say why, and come first when a signature reads them.
        r"pyxis: (?:container start failed|failed to import docker image|couldn't start container"
        r"|failed to create container filesystem)",
        dataclasses.replace(_CONTAINER, severity=S.WARNING),
        "The container runtime could not import or start the job's image.",
        refine=flood,
    ),
    sig(
        "accelerator_call_refused",
        # A GPU library refused the job's arguments or settings (cuDNN, HIP, CUDA runtime), or
        # a library's own CUDA set-up failed: the same call fails on every run.
        r"CUDNN_STATUS_(?:NOT_SUPPORTED|BAD_PARAM)|hipErrorInvalidValue|cudaErrorInvalidValue"
        r"|\(error code = HIP:1\)|(?i:CUDA Setup failed)"
        r"|lib(?:cudart|cublas\w*|cudnn\w*|nccl|amdhip64|rocblas|rccl|hccl|ascendcl)"
        r"\.so[\w.]*: cannot open shared object file",
        APP_FATAL,
        "A GPU library refused the job's call (an unsupported or invalid setting) or could not "
        "be loaded: the job's settings or its environment must change.",
        refine=flood,
    ),
    sig(
        "state_dict_mismatch",
        r"Error\(s\) in loading state_dict|Missing key\(s\) in state_dict"
        r"|Unexpected key\(s\) in state_dict|size mismatch for \S{1,200}: copying a param",
        APP_FATAL,
        "The checkpoint does not fit the model (missing, unexpected or resized weights).",
        refine=flood,
    ),
    sig(
        "script_not_found",
        r"can't open file '[^'\n]{1,512}': \[Errno 2\]",
        APP_FATAL,
        "The launcher cannot find the training script.",
    ),
    sig(
        "undefined_symbol",
        r"\.so(?:\.\d+)*: undefined symbol: |version `[^'\n]{1,80}' not found \(required by",
        APP_FATAL,
        "A compiled extension does not match the installed libraries (rebuild it).",
    ),
    sig(
        "arguments_refused",
        r"^\S+\.py: error: (?:unrecognized arguments|the following arguments are required"
        r"|argument \S+: (?:invalid|expected))",
        APP_FATAL,
        "The script refused its command line (arguments the launcher or the user passed).",
        refine=flood,
    ),
    sig(
        "shape_invalid",
        r"shape '\[[^\]\n]*\]' is invalid for input of size \d{1,20}",
        APP_FATAL,
        "A tensor cannot be reshaped as the code asks (its size does not fit).",
        refine=flood,
    ),
    sig(
        "torch_check_failed",
        r"c10::detail::torchCheckFail|c10::detail::torchInternalAssertFail",
        APP_ERROR,
        "A check inside PyTorch failed on what the program passed it (a TORCH_CHECK).",
        refine=flood,
    ),
    sig(
        "config_key_missing",
        r"Key '[^'\n]{1,200}' not in '[^'\n]{1,200}'|Missing mandatory value: \S{1,200}"
        r"|ConfigAttributeError|ConfigKeyError",
        APP_FATAL,
        "The configuration names a key the schema does not have (or lacks a required one).",
    ),
)


# Python tracebacks: assembled per stream into the exception line's finding.
PYTHON = (
    sig(
        "python_traceback_start",
        r"Traceback \(most recent call last\)",
        hint(C.APPLICATION_ERROR, A.APPLICATION),
        "Start of a Python traceback.",
        internal=True,
    ),
    sig(
        "python_frame",
        r"File \"(?P<tb_file>[^\"\n]{1,512})\", line (?P<tb_line>\d{1,7}),"
        r" in (?P<tb_func>\S{1,200})",
        hint(C.APPLICATION_ERROR, A.APPLICATION),
        "A Python traceback frame.",
        internal=True,
    ),
    sig(
        "python_exception",
        r"(?:^|[\s\]:>|)*])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|\s*$)"
        # Python's base class raised as is ends a traceback as well.
        r"|^(?:\[[^\]\n]*\]:? ?)?Exception: \S",
        APP_ERROR,
        "A Python exception raised by the program.",
        refine=refine_exception,
    ),
)
