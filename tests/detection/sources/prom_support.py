"""A real Prometheus for the tests: a fake dcgm-exporter it scrapes, history it starts with.

dcgm-exporter needs DCGM and a GPU, so ``FakeDcgmExporter`` serves the same text exposition
(names, HELP/TYPE lines, label order of dcgm-exporter 4.x) from a loopback thread; one exporter
per fake node, each with its own port. ``write_backfill`` writes OpenMetrics history for a past
job that ``promtool tsdb create-blocks-from openmetrics`` turns into blocks before Prometheus
starts (blocks added later take up to a minute to appear). See the telemetry note, section 1.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MISSING_BINARY = (
    "The `{name}` binary is not installed. These tests need a real Prometheus: install Debian's "
    "package with `apt-get install --no-install-recommends prometheus` (it provides "
    "/usr/bin/prometheus and /usr/bin/promtool)."
)
METRICS = (  # name, type, help: as dcgm-exporter's default-counters.csv has them
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
)
XID_TEXT = {0: "", 48: "Double Bit ECC Error", 79: "GPU has fallen off the bus"}


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(MISSING_BINARY.format(name=name))
    return path


@dataclass
class FakeGpuNode:
    """One node's GPUs as dcgm-exporter would show them; change it and the next scrape sees it."""

    host: str
    host_label: str = "Hostname"  # released dcgm-exporter; "hostname" on its main branch
    gpus: int = 4
    job: str = "4242"
    xid: dict[int, int] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def render(self) -> str:
        with self.lock:
            lines = []
            for name, kind, help_text in METRICS:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                lines += [
                    self._series(name, gpu) for gpu in range(self.gpus) if gpu not in self.gone
                ]
            return "\n".join(lines) + "\n"

    def _series(self, name: str, gpu: int) -> str:
        labels = [
            f'gpu="{gpu}"',
            f'UUID="GPU-5e1f{gpu:04d}-0000-0000-abcd-{zlib.crc32(self.host.encode()):012x}"',
            f'pci_bus_id="00000000:{0x18 + gpu * 0x1A:02X}:00.0"',
            f'device="nvidia{gpu}"',
            'modelName="NVIDIA H100 80GB HBM3"',
            f'{self.host_label}="{self.host}"',
            'DCGM_FI_DRIVER_VERSION="550.90.07"',
            f'hpc_job="{self.job}"',
        ]
        if name != "DCGM_FI_DEV_XID_ERRORS":
            return f"{name}{{{','.join(labels)}}} {_value(name, gpu):g}"
        code = self.xid.get(gpu, 0)
        labels += [f'err_code="{code}"', f'err_msg="{XID_TEXT.get(code, "Unknown")}"']
        return f"{name}{{{','.join(labels)}}} {code}"


def _value(name: str, gpu: int) -> float:
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_GPU_TEMP": 60 + gpu,
        "DCGM_FI_DEV_POWER_USAGE": 650.5,
        "DCGM_FI_DEV_GPU_UTIL": 90 + gpu,
        "DCGM_FI_DEV_FB_USED": 70_000,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0,
        "DCGM_FI_PROF_SM_ACTIVE": 0.8,
    }[name]


class FakeDcgmExporter:
    """Serves ``node`` at ``http://127.0.0.1:<port>/metrics`` from a thread."""

    def __init__(self, node: FakeGpuNode) -> None:
        self.node = node
        handler = type("Handler", (_MetricsHandler,), {"node": node})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _MetricsHandler(BaseHTTPRequestHandler):
    node: FakeGpuNode

    def do_GET(self) -> None:
        body = self.node.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@dataclass(frozen=True)
class Backfill:
    """A past job on gpu-node-07: 2 GPUs, 2 h at 15 s; GPU 1 reports Xid 48 from ``fault``."""

    start: int
    job: str = "4100"
    host: str = "gpu-node-07"
    step: int = 15
    duration: int = 2 * 3600

    @property
    def fault(self) -> int:
        return self.start + self.duration * 3 // 4


def write_backfill(backfill: Backfill, path: Path) -> None:
    """OpenMetrics with timestamps in seconds and the mandatory ``# EOF``. The Xid series
    changes labels at the fault (err_code 0 -> 48), exactly the split the client must merge."""
    times = range(backfill.start, backfill.start + backfill.duration, backfill.step)
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for gpu in (0, 1):
        for t in times:
            util = 0 if gpu == 1 and t >= backfill.fault else 88
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{_backfill_labels(backfill, gpu)}}} {util} {t}")
    lines += [
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    ]
    for gpu, code, span in _xid_series(backfill, times):
        labels = f'{_backfill_labels(backfill, gpu)},err_code="{code}",err_msg="{XID_TEXT[code]}"'
        lines += [f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {code} {t}" for t in span]
    path.write_text("\n".join([*lines, "# EOF"]) + "\n")


def _xid_series(backfill: Backfill, times: range) -> list[tuple[int, int, list[int]]]:
    before = [t for t in times if t < backfill.fault]
    after = [t for t in times if t >= backfill.fault]
    return [(0, 0, list(times)), (1, 0, before), (1, 48, after)]


def _backfill_labels(backfill: Backfill, gpu: int) -> str:
    return (
        f'gpu="{gpu}",UUID="GPU-0000700{gpu}-0007-000{gpu}-abcd-0000feed000{gpu}",'
        f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{backfill.host}",'
        f'hpc_job="{backfill.job}",job="dcgm",instance="{backfill.host}:9400"'
    )


@dataclass(frozen=True)
class WebSecurity:
    """Prometheus' web config (``--web.config.file``): HTTPS with a self-signed certificate for
    127.0.0.1, and basic auth. The bcrypt hash is of ``PASSWORD`` at cost 4 (fast per request)."""

    directory: Path
    username: str = "reader"
    PASSWORD = "prom-reader-password"  # noqa: S105 - a test credential on loopback
    HASH = "$2b$04$sPo0s1Ojb4MZRd06UXSbNe8/iE1upVC7iX2l8W1Q6AsSlEizz9THm"

    @property
    def certificate(self) -> Path:
        return self.directory / "prometheus.pem"

    def write(self) -> Path:
        key = self.directory / "prometheus.key"
        subprocess.run(
            [
                require_binary("openssl"),
                *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
                *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
                *("-keyout", str(key), "-out", str(self.certificate)),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        config = self.directory / "web.yml"
        config.write_text(
            f"tls_server_config:\n  cert_file: {self.certificate}\n  key_file: {key}\n"
            f"basic_auth_users:\n  {self.username}: {self.HASH}\n"
        )
        return config

    def open(self, url: str) -> Any:
        context = ssl.create_default_context(cafile=str(self.certificate))
        pair = base64.b64encode(f"{self.username}:{self.PASSWORD}".encode()).decode()
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {pair}"})  # noqa: S310
        return urllib.request.urlopen(request, timeout=5, context=context)  # noqa: S310


class PrometheusProcess:
    """Debian's prometheus on a free loopback port, with its own data dir; stopped by PID.
    With ``security`` it answers only HTTPS with basic auth."""

    def __init__(
        self, workdir: Path, targets: list[str], security: WebSecurity | None = None
    ) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.security = security
        scheme = "https" if security else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.config.write_text(_config(targets))
        self.log = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = require_binary("prometheus")
        web = [f"--web.config.file={self.security.write()}"] if self.security else []
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    "--storage.tsdb.retention.time=3650d",  # keeps the backfilled past
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                    *web,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_until(self, query: str, predicate: Any, timeout: float, what: str) -> Any:
        """Poll an instant query until ``predicate(result)`` holds; fail with the log if not."""
        deadline = time.monotonic() + timeout
        result: Any = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                result = self.query(query)
                if predicate(result):
                    return result
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise RuntimeError(
            f"Prometheus: {what} not seen within {timeout} s; got {result!r}; "
            f"scrape errors: {self._scrape_errors()}\n{self.log_tail()}"
        )

    def query(self, promql: str) -> list[Any]:
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with self._open(url) as response:
            data: list[Any] = json.load(response)["data"]["result"]
            return data

    def _open(self, url: str) -> Any:
        if self.security is not None:
            return self.security.open(url)
        return urllib.request.urlopen(url, timeout=5)  # noqa: S310 - loopback http

    def _scrape_errors(self) -> list[str]:
        try:
            with self._open(f"{self.url}/api/v1/targets") as response:
                targets = json.load(response)["data"]["activeTargets"]
        except OSError as exc:
            return [f"cannot list targets: {exc}"]
        return [f"{t['scrapeUrl']}: {t['lastError']}" for t in targets if t.get("lastError")]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"Prometheus exited with {self.process.returncode}:\n{self.log_tail()}"
            )


@dataclass(frozen=True)
class PrometheusLab:
    """A running Prometheus and what it scrapes: node 01 labels its host ``Hostname`` (released
    dcgm-exporter), node 02 ``hostname`` (main branch); both run job 4242."""

    url: str
    nodes: dict[str, FakeGpuNode]
    backfill: Backfill
    server: PrometheusProcess


def create_blocks(openmetrics: Path, data_dir: Path) -> None:
    promtool = require_binary("promtool")
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _config(targets: list[str]) -> str:
    quoted = ", ".join(f"'{t}'" for t in targets)
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: [{quoted}]\n"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
