"""``manage.py screenshots``: PNGs of the console's main pages, taken by a real headless Chromium.

Point it at a running console with data (``make run`` serves the simulated demo) and a user who
may see every page (a reviewer and operator such as the demo's alice, the default)::

    python manage.py screenshots --url http://127.0.0.1:8000 --username alice

It logs in through the login page, follows links to a workload and an anomaly, diagnoses a
sample log on the Test signals page and writes one PNG per page to ``docs/screenshots/``.
Chromium and its driver come from Debian (``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from .seed_demo import DEMO_PASSWORD

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Without the background-networking flags Chromium keeps trying to reach the internet.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
# Long pages are cut here: the README shows the top of each page.
MAX_HEIGHT = 1800
# An Xid 48 with the NCCL errors it causes, so the diagnosis has a root cause to find.
SAMPLE_LOG = """\
[rank3]:[E1129 12:50:32.947870074 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) \
Rank 3] Process group watchdog thread terminated with exception: CUDA error: uncorrectable \
ECC error encountered
[ 2535.679210] NVRM: Xid (PCI:0000:3a:00): 48, pid=2982568, name=python3, An uncorrectable \
double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
[rank12]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote \
process exited or there was a network error, NCCL version 2.21.5
srun: error: gpu-node-004: task 0: Exited with exit code 1
"""


def chromium_driver(width: int, height: int) -> Any:
    """A headless Chromium from Debian's packages (never a downloaded browser or driver)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        raise CommandError(
            f"{' and '.join(missing)} not found: install Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver  # noqa: PLC0415 - only this command needs Selenium
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    # A fresh profile: no cookies or cache from an earlier run.
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='console-shots-')}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class Command(BaseCommand):
    help = "Take PNG screenshots of the console's main pages with a real headless Chromium."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="a running console")
        parser.add_argument("--username", default="alice")
        parser.add_argument(
            "--password",
            default=os.environ.get("CONSOLE_PASSWORD", DEMO_PASSWORD),
            help="(or CONSOLE_PASSWORD; default: the demo users' password)",
        )
        parser.add_argument("--cluster", default="demo")
        parser.add_argument("--out", default=str(Path(settings.BASE_DIR) / "docs" / "screenshots"))
        parser.add_argument("--width", type=int, default=1440)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        driver = chromium_driver(options["width"], 900)
        try:
            shots = Shots(driver, options["url"].rstrip("/"), out, self.stdout.write)
            shots.login(options["username"], options["password"])
            shots.take_all(options["cluster"])
        finally:
            # Always, or a headless Chromium outlives the command.
            driver.quit()


class Shots:
    """Visits the pages in the order a visitor would and saves each one."""

    def __init__(self, driver: Any, base: str, out: Path, say: Any) -> None:
        self.driver, self.base, self.out, self.say = driver, base, out, say

    def login(self, username: str, password: str) -> None:
        from selenium.webdriver.common.by import By  # noqa: PLC0415

        self.driver.get(f"{self.base}/accounts/login/")
        self.driver.find_element(By.NAME, "username").send_keys(username)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
        try:
            # A failed login shows the login page again: leaving it is the sign of success.
            self.wait_for("!location.pathname.startsWith('/accounts/login/')")
        except CommandError as exc:
            raise CommandError(f"could not log in to {self.base} as {username}") from exc

    def take_all(self, cluster: str) -> None:
        self.shoot("overview", "/")
        self.shoot("cluster", f"/clusters/{cluster}/")
        self.shoot("workloads", f"/workloads/?cluster={cluster}")
        # Links are followed, not guessed, so the shots show whatever the data holds.
        workload = self.first_link(f"/workloads/?cluster={cluster}", r"/workloads/\d+/$")
        if workload:
            self.shoot("workload", workload, wait_for_chart=True)
            anomaly = self.first_link(workload, r"/anomalies/\d+/$")
            if anomaly:
                self.shoot("anomaly", anomaly)
        self.shoot("nodes", f"/clusters/{cluster}/nodes/")
        self.shoot("review-queue", f"/reviews/?cluster={cluster}", wait_for_chart=True)
        self.shoot("mode", f"/clusters/{cluster}/mode/", wait_for_chart=True)
        self.shoot("audit", f"/audit/?cluster={cluster}", settle=2.0)
        self.shoot("settings", f"/clusters/{cluster}/settings/")
        self.test_signals()

    def first_link(self, path: str, pattern: str) -> str | None:
        """The first link on the page whose path matches ``pattern``."""
        from selenium.webdriver.common.by import By  # noqa: PLC0415

        self.driver.get(self.base + path)
        for link in self.driver.find_elements(By.CSS_SELECTOR, "main a[href]"):
            href = str(link.get_attribute("href")).removeprefix(self.base)
            if re.search(pattern, href):
                return href
        return None

    def shoot(
        self, name: str, path: str, *, wait_for_chart: bool = False, settle: float = 0.5
    ) -> None:
        self.driver.get(self.base + path)
        if wait_for_chart:
            self.wait_for("document.querySelector('.chart[data-rendered]') !== null")
        # Fonts and transitions have no event to wait for.
        time.sleep(settle)
        self.save(name)

    def test_signals(self) -> None:
        from selenium.webdriver.common.by import By  # noqa: PLC0415

        self.driver.get(f"{self.base}/signals/")
        self.driver.find_element(By.NAME, "text").send_keys(SAMPLE_LOG)
        self.driver.find_element(By.CSS_SELECTOR, "#signals-form button[type=submit]").click()
        self.wait_for("document.querySelector('#diagnosis dl') !== null")
        self.save("test-signals")

    def wait_for(self, condition: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.driver.execute_script(f"return {condition}"):
            if time.monotonic() > deadline:
                raise CommandError(f"timed out on {self.driver.current_url}: {condition}")
            time.sleep(0.1)

    def save(self, name: str) -> None:
        """The whole page: the window is resized to the document's height first."""
        # The window's own frame takes part of its height: add it, or the page is cut.
        height = self.driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"
            " + window.outerHeight - window.innerHeight"
        )
        width = self.driver.get_window_size()["width"]
        self.driver.set_window_size(width, min(max(height, 700), MAX_HEIGHT))
        time.sleep(0.5)
        path = self.out / f"{name}.png"
        self.driver.save_screenshot(str(path))
        # Back to the usual size, so the next page lays out as a visitor sees it.
        self.driver.set_window_size(width, 900)
        self.say(f"wrote {path}")
