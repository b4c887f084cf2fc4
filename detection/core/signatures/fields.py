"""Where a log line came from: host, rank, local rank, GPU, job id, PCI id.

Launchers and log shippers wrap each line in prefixes (srun ``--label``'s ``12: ``, pdsh's
``node-07: ``, torchrun's ``[rank12]:`` / ``[default3]:``, NCCL's ``host:pid:tid [3]``, syslog's
``Nov 29 11:00:01 node-07 kernel:``, glog and timestamp brackets). ``extract_fields`` peels them
off, remembering what they say, and then reads the identifiers the message itself names
(``[Rank 3]``, ``(GPU 5; ...)``, ``JOB 1234``). It only runs on lines a signature matched.

All prefix forms are alternatives of one anchored RE2 program, tried in order (RE2 alternation
is leftmost-first), so peeling one prefix costs one match.
"""

from __future__ import annotations

from collections.abc import Mapping

from detection.core.signatures.model import LineFields, Regex, compile_re

_PREFIX = compile_re(
    r"^(?:"
    # torchrun --tee: [rank12]: (global rank) or [default3]: (local rank of role "default")
    r"(?P<torch>\[(?P<torch_kind>rank|default)(?P<torch_num>\d{1,6})\]:\s?)"
    # mpirun --tag-output: [jobid,rank]<stdout>:
    r"|(?P<mpi>\[\d{1,10},(?P<mpi_rank>\d{1,6})\]<(?:stdout|stderr)>:\s?)"
    # NCCL: host:pid:tid [local rank]
    r"|(?P<nccl>(?P<nccl_host>[A-Za-z0-9][\w.-]{0,253}):\d{1,10}:\d{1,10}"
    r" \[(?P<nccl_lr>\d{1,4})\] )"
    # syslog / journald: "Nov 29 11:00:01 node-07 kernel: "
    r"|(?P<syslog>(?:[A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d"
    r"|\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)"
    r" (?P<syslog_host>[A-Za-z0-9][\w.-]{0,253}) [\w./-]{1,64}(?:\[\d{1,10}\])?: )"
    # a log shipper's or pdsh's IPv4 address: "192.168.11.119: "
    r"|(?P<ip>(?P<ip_host>\d{1,3}(?:\.\d{1,3}){3}): )"
    # pdsh / DeepSpeed launcher: "worker-5: " or "node-07:" (checked in Python: must look like a
    # host, and the colon must not be followed by a digit as in "cuda:0")
    r"|(?P<host>(?P<host_name>[A-Za-z][\w.-]{0,253}):(?:[^0-9]|$))"
    # srun --label: "12: "
    r"|(?P<label>\s{0,8}(?P<label_num>\d{1,6}): )"
    # timestamps, dmesg, glog, "(Worker pid=12)", and any short [bracketed] prefix
    r"|(?P<other>\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:?\s*"
    r"|\[\s*\d+\.\d+\]\s*"
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]\s*"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\s]{1,200}\] "
    r"|\((?:[A-Za-z]\w*) pid=\d+\)\s*"
    r"|\[[^\]\n]{0,120}\]:?\s*)"
    r")"
)

_LOG_FILE_SUFFIXES = (".log", ".out", ".err", ".txt")
_GPU_ID = compile_re(r"(?i)^(?:GPU|MIG)-[0-9a-f-]+$")
_NOT_HOSTS = ("error", "exception", "warning", "warn", "info", "debug", "note", "traceback")

# Identifiers named inside the message; each is searched only when a cheap substring test says
# it can be there.
_RANK_IN_TEXT = compile_re(
    r"\[(?:PG [^\]]{0,60}?)?Rank (?P<a>\d{1,6})\]|\bRank (?P<b>\d{1,6})\b"
    r"|\brank\s*:\s*(?P<c>\d{1,6})|\brank (?P<d>\d{1,6}) n[Rr]anks\b"
)
_LOCAL_RANK_IN_TEXT = compile_re(r"\b(?:local_rank\s*[:=]?\s*|localRank )(?P<lr>\d{1,4})")
_GPU_IN_TEXT = compile_re(
    r"\(GPU (?P<a>\d{1,3});|\bGPU (?P<b>\d{1,3}) has a total capacity|\bcudaDev (?P<c>\d{1,3})\b"
    r"|, device (?P<d>\d{1,3}),"
)
_JOB_IN_TEXT = compile_re(r"(?:\bJOB |\bSTEP |\bJobId=|\bStepId=)(?P<job>\d{1,12})")
# A syslog line quoted inside another message ("... Error: May 29 01:37:38 node-7 kernel: ...").
_SYSLOG_IN_TEXT = compile_re(
    r"\b\d\d:\d\d:\d\d(?:\.\d+)? (?P<host>[A-Za-z0-9][\w.-]{0,253}) kernel: "
)
_PCI_IN_TEXT = compile_re(
    r"\b(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b"
)


def _is_host(name: str) -> bool:
    lowered = name.lower()
    if not any(ch.isdigit() for ch in name):
        return False
    if _GPU_ID.search(name) is not None:
        # A GPU's name or UUID ("GPU-1234:", "GPU-5f3a..."): its node is found elsewhere.
        return False
    return not any(lowered.endswith(word) for word in _NOT_HOSTS)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


class _Peeled:
    """Scratch state while peeling prefixes; becomes a frozen ``LineFields``."""

    def __init__(self, data: bytes) -> None:
        self.rest = data
        self.host: str | None = None
        self.rank: int | None = None
        self.local_rank: int | None = None

    def step(self) -> bool:
        """Peel one prefix; False when none is left."""
        found = _PREFIX.match_bytes(self.rest)
        if found is None or found[1] == 0:
            return False
        _, end, groups = found
        if "host" in groups:
            return self._host(groups["host_name"])
        self.rest = self.rest[end:]
        if "torch" in groups:
            number = _int(groups.get("torch_num"))
            if groups.get("torch_kind") == "rank":
                self.rank = self.rank if self.rank is not None else number
            elif self.local_rank is None:
                self.local_rank = number
        elif "nccl" in groups or "syslog" in groups:
            self.host = self.host or groups.get("nccl_host") or groups.get("syslog_host")
            if self.local_rank is None:
                self.local_rank = _int(groups.get("nccl_lr"))
        elif "mpi" in groups and self.rank is None:
            self.rank = _int(groups.get("mpi_rank"))
        elif "ip" in groups:
            self.host = self.host or groups.get("ip_host")
        elif "label" in groups and self.rank is None:
            # srun --label numbers tasks; with one task per GPU that is the global rank.
            self.rank = _int(groups.get("label_num"))
        return True

    def _host(self, host: str) -> bool:
        if not _is_host(host):
            return False
        # grep -H and log collectors put the file's name first ("worker-3.log:"): the host
        # is in the line that follows it, not in the file's name.
        if not host.lower().endswith(_LOG_FILE_SUFFIXES):
            self.host = self.host or host
        # Consume "host:" and one following space, keep anything else (e.g. "[rank3]:").
        rest = self.rest[len(host.encode()) + 1 :]
        self.rest = rest[1:] if rest.startswith(b" ") else rest
        return True


def strip_prefixes(text: str) -> str:
    """The message without launcher, syslog and timestamp prefixes."""
    return extract_fields(text).message


def extract_fields(
    text: str | bytes, overrides: Mapping[str, str | None] | None = None
) -> LineFields:
    """Peel prefixes off ``text`` and read the identifiers it shows.

    ``overrides`` are a signature's named groups (``host``, ``rank``, ``local_rank``, ``gpu``,
    ``job_id``, ``pci``, ``xid``); they win over what the prefixes say.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
    peeled = _Peeled(data)
    for _ in range(12):
        if not peeled.step():
            break
    groups: Mapping[str, str | None] = overrides or {}
    rank = _int(groups.get("rank") or groups.get("rank2"))
    if rank is None:
        rank = peeled.rank
    if rank is None and b"ank" in data:
        rank = _search_int(_RANK_IN_TEXT, data)
    local_rank = _int(groups.get("local_rank"))
    if local_rank is None:
        local_rank = peeled.local_rank
    if local_rank is None and (b"local_rank" in data or b"localRank" in data):
        local_rank = _search_int(_LOCAL_RANK_IN_TEXT, data)
    gpu = _int(groups.get("gpu"))
    if gpu is None and (b"GPU" in data or b"cudaDev" in data or b"device" in data):
        gpu = _search_int(_GPU_IN_TEXT, data)
    job_id = groups.get("job_id")
    if job_id is None and (b"JOB" in data or b"STEP" in data or b"Id=" in data):
        job_id = _search_str(_JOB_IN_TEXT, data)
    # RE2 names a group once, so a pattern with several host alternatives numbers them.
    host = (
        groups.get("host")
        or groups.get("host2")
        or groups.get("host3")
        or groups.get("host4")
        or peeled.host
    )
    if host is None and b" kernel: " in data:
        host = _search_str(_SYSLOG_IN_TEXT, data)
    return LineFields(
        message=peeled.rest.decode("utf-8", "replace").strip(),
        host=host,
        rank=rank,
        local_rank=local_rank,
        gpu=gpu,
        job_id=job_id,
        pci=groups.get("pci") or _pci_in(data),
        xid=_int(groups.get("xid")),
    )


def _pci_in(data: bytes) -> str | None:
    # Only GPU driver lines name PCI ids; elsewhere the shape also fits IPv6 fragments.
    if b"NVRM" not in data and b"PCI" not in data:
        return None
    return _search_str(_PCI_IN_TEXT, data)


def _search_int(pattern: Regex, data: bytes) -> int | None:
    return _int(_search_str(pattern, data))


def _search_str(pattern: Regex, data: bytes) -> str | None:
    found = pattern.match_bytes(data)
    if found is None:
        return None
    return next((value for value in found[2].values() if value), None)
