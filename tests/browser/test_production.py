"""The console as production runs it: DEBUG off, static files collected and served by the
application under Daphne (no development server), seen in a real Chromium."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from django.conf import settings
from django.utils import timezone

from fleet import services
from fleet.core.scheduler import ClusterSnapshot, NodeRecord, NodeState
from fleet.models import Attempt
from tests.factories import JobRecordFactory
from tests.test_settings import ROOT, free_port, get, manage, production

from .support import PASSWORD, ConsoleBrowserTestCase

pytestmark = pytest.mark.browser


def database_url() -> str:
    """The test database, for a server process of its own (it sees what the test commits)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.mysql":
        pytest.fail("the production browser test needs the MariaDB test database (make test)")
    return f"mysql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@contextmanager
def daphne_with_debug_off() -> Iterator[str]:
    """collectstatic, then Daphne with DEBUG off; its base URL. TLS is a proxy's job: the test
    speaks plain HTTP, so the HTTPS-only defaults are turned off as a proxy setup would not."""
    with TemporaryDirectory(prefix="console-static-") as static:
        env = production(
            STATIC_ROOT=static,
            DATABASE_URL=database_url(),
            SECURE_SSL_REDIRECT="false",
            SESSION_COOKIE_SECURE="false",
            CSRF_COOKIE_SECURE="false",
            SECURE_HSTS_SECONDS="0",
        )
        collected = manage("collectstatic", "--noinput", env=env)
        assert collected.returncode == 0, collected.stderr
        port = free_port()
        log = Path(static) / "daphne.log"
        with log.open("w") as output:
            daphne = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                 "recovery_console.asgi:application"],
                env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                daphne.terminate()
                daphne.wait(timeout=10)


class ProductionSettingsTests(ConsoleBrowserTestCase):
    base = ""

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def test_with_debug_off_pages_are_styled_and_draw_their_charts(self) -> None:
        cluster = services.create_cluster("user:admin", "research")
        now = timezone.now()
        nodes = tuple(NodeRecord(f"n{i}", NodeState.ALLOCATED, gpus=8) for i in (1, 2))
        job = JobRecordFactory(job_id="800", nodes=("n1", "n2"), start_time=now)
        services.record_snapshot("test", cluster, ClusterSnapshot(now, (job,), nodes))
        workload = Attempt.objects.get(job_id="800").workload_id
        self.person("vera", "viewer", password=PASSWORD)
        with daphne_with_debug_off() as self.base:
            deadline = time.monotonic() + 60
            while True:  # until Daphne answers
                try:
                    get(self.base + "/accounts/login/", {})
                    break
                except OSError:
                    assert time.monotonic() < deadline, "daphne did not start"
                    time.sleep(0.3)
            self.log_in_with_the_form("vera", PASSWORD)
            self.open(f"/workloads/{workload}/")
            styled = self.driver.execute_script(
                "return [...document.styleSheets].some("
                "s => s.href && s.href.includes('/static/') && s.cssRules.length > 0)"
            )
            self.assertTrue(styled, "the console's stylesheet was not served")
            chart = self.wait_until(
                lambda: self.finds(f'#timeline-{workload}[data-rendered="1"]'),
                "the timeline chart to be drawn by Plotly",
            )[0]
            self.assertTrue(chart.find_elements("css selector", ".main-svg"))
