"""A real headless Chromium against the console served by Daphne in a subprocess.

``ConsoleBrowserTestCase`` is a ``ChannelsLiveServerTestCase`` (MariaDB and the Redis channel
layer are shared with the server process) with one Chromium per class. Debian's ``chromium`` and
``chromium-driver`` must be installed: without them the tests fail and say so, never skip.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import Client
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.factories import UserFactory

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# The flags of ../shared/notes/browser.md: without the background-networking ones Chromium
# keeps trying to reach the internet; as root it needs --no-sandbox.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
PASSWORD = "browser-test-password"
WAIT = 15.0


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        raise RuntimeError(
            f"browser tests need {' and '.join(missing)}: install Debian's packages "
            "`chromium` and `chromium-driver` (scripts/system-packages.sh test does)"
        )


def chromium(download_dir: Path) -> webdriver.Chrome:
    require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='console-browser-')}")
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(download_dir), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(download_dir)}
    )
    return driver


class ConsoleBrowserTestCase(ChannelsLiveServerTestCase):  # type: ignore[misc]
    """One Chromium per test class; helpers to log in, wait and read the page."""

    driver: webdriver.Chrome
    downloads: Path

    @classmethod
    def setUpClass(cls) -> None:
        require_chromium()
        # The server process names its database "test_" + NAME unless TEST NAME is set; under
        # pytest-django NAME already is the test database.
        database = settings.DATABASES["default"]
        database.setdefault("TEST", {})["NAME"] = database["NAME"]
        super().setUpClass()
        cls.downloads = Path(tempfile.mkdtemp(prefix="console-downloads-"))
        cls.driver = chromium(cls.downloads)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.driver.quit()
        shutil.rmtree(cls.downloads, ignore_errors=True)
        super().tearDownClass()

    def setUp(self) -> None:
        super().setUp()
        self.driver.delete_all_cookies()

    # --- people ------------------------------------------------------------------------------

    def person(self, username: str, *roles: str, password: str = "") -> Any:
        # Transactional tests empty every table afterwards, the migration's role groups too.
        for role in roles:
            Group.objects.get_or_create(name=role)
        user = UserFactory(username=username, roles=list(roles))
        if password:
            user.set_password(password)
            user.save()
        return user

    def log_in_with_the_form(self, username: str, password: str) -> None:
        self.open("/accounts/login/")
        self.driver.find_element(By.NAME, "username").send_keys(username)
        self.driver.find_element(By.NAME, "password").send_keys(password)
        self.driver.find_element(By.CSS_SELECTOR, "main form button[type=submit]").click()
        self.wait_until(lambda: "/accounts/login/" not in self.driver.current_url, "logged in")

    def log_in_as(self, user: Any) -> None:
        """A session made on the server side, handed to the browser as its cookie."""
        client = Client()
        client.force_login(user)
        self.driver.delete_all_cookies()
        self.open("/accounts/login/")
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        self.driver.add_cookie({"name": settings.SESSION_COOKIE_NAME, "value": cookie.value})

    # --- the page ----------------------------------------------------------------------------

    def open(self, path: str) -> None:
        self.driver.get(self.live_server_url + path)

    def find(self, selector: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def finds(self, selector: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def text(self) -> str:
        return str(self.driver.execute_script("return document.body.innerText"))

    def wait_until(self, condition: Callable[[], object], what: str, timeout: float = WAIT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
            except StaleElementReferenceException:
                value = None  # the page changed under us (a navigation or a live refresh)
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.1)

    def wait_for_live_updates(self) -> None:
        """Every socket of the page is open (events sent from now on reach it)."""
        self.wait_until(
            lambda: self.driver.execute_script("return document.body.dataset.live") == "open",
            "the page's websockets to open",
        )

    def selected_advice(self) -> str:
        """The advice the review queue has selected, as its page shows it."""
        return str(self.driver.execute_script("return document.body.dataset.selectedAdvice || ''"))

    def press(self, *keys: str) -> None:
        """Keys to whatever has the focus, as a person typing."""
        for key in keys:
            ActionChains(self.driver).send_keys(key).perform()
