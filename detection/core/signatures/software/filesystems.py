"""Built-in signatures of the filesystems: full, read-only or stale mounts, I/O errors, and
Lustre and NFS clients that lost their servers."""

from __future__ import annotations

from detection.core.signatures.entries import FS, A, C, K, R, S, sig
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood

FILESYSTEMS = (
    sig(
        "fs_no_space",
        r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]|StorageFull"
        r"|ENOSPC|EDQUOT",
        FS,
        "A write (usually a checkpoint) failed: the filesystem or the quota is full.",
    ),
    sig(
        "fs_read_only",
        r"Read-only file system|\[Errno 30\]|EROFS",
        FS,
        "A write failed because the filesystem is mounted read-only.",
    ),
    sig(
        "fs_stale_handle",
        r"(?i)stale (?:NFS )?file handle|\[Errno 116\]|ESTALE",
        FS,
        "A shared filesystem lost track of a file (NFS/Lustre stale handle).",
    ),
    sig(
        "checkpoint_archive_broken",
        r"unexpected pos \d{1,20} vs \d{1,20}|FileStream\.Write incomplete"
        r"|unexpected EOF, expected \d{1,20} more bytes|The file might be corrupted"
        r"|storage has wrong size|PytorchStreamReader failed|failed finding central directory"
        r"|invalid load key|HeaderTooLarge|SafetensorError|incomplete metadata",
        FS,
        "A checkpoint file is truncated or corrupt, or its write stopped short.",
    ),
    sig(
        "storage_write_failed",
        r"Error writing (?:local )?file|Error writing \S+ in \w+ database"
        r"|Failed to acquire lock on file|unable to lock file"
        r"|OP_REQUIRES failed at save_restore_v2_ops|Unable to connect to endpoint",
        FS,
        "A write to storage failed (tensorstore and orbax phrase it so).",
    ),
    sig(
        "checkpoint_save_failed",
        # A distributed checkpoint's save or load failed on its ranks (torch.distributed's
        # checkpoint, orbax): the next save meets the same path.
        r"\bCheckpointException\b|(?i:(?:checkpoint (?:save|saving)|saving (?:the )?checkpoint)"
        r" failed|failed to save (?:the )?checkpoint)",
        # On every rank alike: the saving code or its settings, not one node's disk.
        classify(K.CRASH, C.FILESYSTEM_IO, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "Saving (or loading) a distributed checkpoint failed on its ranks.",
        refine=flood,
    ),
    sig(
        "checkpoint_unwritable",
        r"File \S{1,512} cannot be opened|Parent directory \S{1,512} does not exist",
        FS,
        "PyTorch could not open a checkpoint file for writing (its directory is missing or the "
        "filesystem is full).",
    ),
    sig(
        "fs_io_error",
        r"Input/output error|\[Errno 5\]|PytorchStreamReader failed reading"
        r"|PytorchStreamWriter failed writing file|file write failed"
        # EIO as a word alone turns up by chance in binary output: only as an error code.
        r"|(?i:errno|error|err|returned|code|status|with|=)[ :(]{0,2}-?EIO\b|\(-?EIO\)",
        FS,
        "I/O error reading or writing a file.",
    ),
    sig(
        "fs_lustre_error",
        r"LustreError|Lustre: [^\n]{0,200}(?:evicted|timed out|not responding|lost connection)",
        FS,
        "Lustre client error.",
        refine=flood,
    ),
    sig(
        "fs_nfs_not_responding",
        r"nfs: server \S{1,255} not responding",
        FS,
        "An NFS server stopped answering.",
        refine=flood,
    ),
)
