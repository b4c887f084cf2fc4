"""Settings are read from the environment at start-up, so each case starts a fresh Python."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({
    "engine": settings.DATABASES["default"]["ENGINE"],
    "options": settings.DATABASES["default"].get("OPTIONS", {}),
    "eager": settings.CELERY_TASK_ALWAYS_EAGER,
    "broker": settings.CELERY_BROKER_URL,
    "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
}))
"""
VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_TASK_ALWAYS_EAGER",
    "CHANNEL_LAYER",
    "DEBUG",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "AUDIT_HMAC_KEY",
    "AUDIT_HMAC_KEY_FILE",
)


def start(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    clean["DJANGO_SETTINGS_MODULE"] = "recovery_console.settings"
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env=clean | env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def settings_with(**env: str) -> dict[str, object]:
    result = start(**env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_with_nothing_set_it_runs_embedded() -> None:
    assert settings_with() == {
        "engine": "django.db.backends.sqlite3",
        "options": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        "eager": True,
        "broker": "memory://",
        "layer": "channels.layers.InMemoryChannelLayer",
    }


def test_mysql_and_redis_urls_give_utf8mb4_celery_on_redis_and_channels_redis() -> None:
    found = settings_with(
        DATABASE_URL="mysql://rc:secret@127.0.0.1:3306/rc", REDIS_URL="redis://127.0.0.1:6379/0"
    )
    assert found["engine"] == "django.db.backends.mysql"
    assert found["options"]["charset"] == "utf8mb4"  # type: ignore[index]
    assert found["eager"] is False
    assert found["broker"] == "redis://127.0.0.1:6379/0"
    assert found["layer"] == "channels_redis.core.RedisChannelLayer"


def test_the_secret_key_can_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    result = start(DEBUG="false", SECRET_KEY_FILE=str(secret), AUDIT_HMAC_KEY_FILE=str(secret))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DATABASE_URL": "mysql//no-scheme-separator"},
            "DATABASE_URL='mysql//no-scheme-separator' is not understood",
        ),
        ({"DATABASE_URL": "postgres://db/x"}, "DATABASE_URL='postgres://db/x' is not understood"),
        ({"DATABASE_URL": "mysql://u:p@127.0.0.1:3306/"}, "names no database"),
        ({"REDIS_URL": "http://127.0.0.1:6379"}, "is not a redis:// URL"),
        (
            {"CELERY_TASK_ALWAYS_EAGER": "maybe"},
            "CELERY_TASK_ALWAYS_EAGER='maybe' is not a boolean",
        ),
        ({"CELERY_TASK_ALWAYS_EAGER": "false"}, "needs REDIS_URL"),
        ({"CHANNEL_LAYER": "kafka"}, "CHANNEL_LAYER='kafka' is not one of memory, redis"),
        ({"DEBUG": "false"}, "SECRET_KEY (or SECRET_KEY_FILE) must be set"),
        (
            {"DEBUG": "false", "SECRET_KEY": "k"},
            "AUDIT_HMAC_KEY (or AUDIT_HMAC_KEY_FILE) must be set",
        ),
        ({"SECRET_KEY_FILE": "/nonexistent/secret"}, "cannot be read"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(env: dict[str, str], message: str) -> None:
    result = start(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def production(**env: str) -> dict[str, str]:
    """The environment of a production process: DEBUG off, a real secret key and audit key."""
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return (
        clean
        | {
            "DJANGO_SETTINGS_MODULE": "recovery_console.settings",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "AUDIT_HMAC_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
        }
        | env
    )


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_with_debug_off_the_deployment_checks_are_clean() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production())
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_behind_a_tls_proxy_each_secure_default_can_be_turned_off() -> None:
    probe = (
        "import json, django; from django.conf import settings; django.setup(); print(json.dumps("
        "[settings.SECURE_PROXY_SSL_HEADER, settings.SECURE_SSL_REDIRECT, "
        "settings.SECURE_HSTS_SECONDS, settings.SESSION_COOKIE_SECURE]))"
    )
    env = production(
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="0",
        SESSION_COOKIE_SECURE="false",
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [["HTTP_X_FORWARDED_PROTO", "https"], False, 0, False]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        request = urllib.request.Request(url, headers=headers)  # noqa: S310 (http only)
        with opener.open(request, timeout=10) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_with_debug_off_daphne_serves_the_collected_static_files(tmp_path: Path) -> None:
    env = production(
        STATIC_ROOT=str(tmp_path / "static"), SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO"
    )
    collected = manage("collectstatic", "--noinput", env=env)
    assert collected.returncode == 0, collected.stderr
    port = free_port()
    daphne = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "recovery_console.asgi:application"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/static/console/console.css"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, headers, body = get(url, {"X-Forwarded-Proto": "https"})
                break
            except OSError:
                assert daphne.poll() is None, daphne.stderr.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.2)
        plain_status, plain_headers, _ = get(url, {})
    finally:
        daphne.terminate()
        daphne.wait(timeout=10)
    assert status == 200
    assert headers["Content-Type"].startswith("text/css")
    assert body == (ROOT / "static" / "console" / "console.css").read_bytes()
    assert "max-age=31536000" in headers["Strict-Transport-Security"]
    # Plain HTTP is sent to HTTPS.
    assert plain_status == 301
    assert plain_headers["Location"].startswith("https://")
