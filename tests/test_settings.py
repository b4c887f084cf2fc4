"""Settings are read from the environment at start-up, so each case starts a fresh Python."""

import json
import os
import subprocess
import sys
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
    "backend": settings.CLUSTER_BACKEND,
}))
"""
VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_TASK_ALWAYS_EAGER",
    "CHANNEL_LAYER",
    "CLUSTER_BACKEND",
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
        "backend": "simulated",
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
        ({"CLUSTER_BACKEND": "pbs"}, "CLUSTER_BACKEND='pbs' is not one of simulated, slurm"),
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
