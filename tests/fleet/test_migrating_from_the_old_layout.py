"""A site that ran the release before the fleet base and the tools moved to packages of their own
(commit 7dd617d: ``recovery_console.fleet``, ``recovery_console.demo``, ...) upgrades in place.
That release's own code migrates a fresh MariaDB database and fills it by running its simulated
demo cluster (workloads, attempts, anomalies, advice, audit entries); then today's ``migrate``
runs on the same database. Every row of every table is still there with the same values, and
today's code verifies the old audit chain."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import MySQLdb
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
OLD_LAYOUT = "7dd617d"
# Twenty simulated minutes of the demo cluster at its high fault rate: a dozen interruptions.
FILL_WITH_THE_OLD_DEMO = """
from recovery_console.demo.loop import SimulationLoop, simulated_clusters
loop = SimulationLoop(simulated_clusters(), interval=30.0)
for _ in range(40):
    for runner, controller in zip(loop.runners, loop.controllers):
        loop._step(runner, controller)
"""


def server_settings() -> dict[str, object]:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.mysql":
        pytest.fail(
            "this test migrates a MariaDB database: run it with a mysql DATABASE_URL", False
        )
    return {
        "host": db["HOST"] or "127.0.0.1",
        "port": int(db["PORT"] or 3306),
        "user": db["USER"],
        "password": db["PASSWORD"],
    }


@pytest.fixture
def database() -> Iterator[str]:
    # The test user may create databases named test_*.
    name = f"test_layout_{uuid.uuid4().hex[:12]}"
    server = MySQLdb.connect(**server_settings())
    server.cursor().execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        server.cursor().execute(f"DROP DATABASE {name}")
        server.close()


def old_release(into: Path) -> Path:
    archive = into / "old.tar"
    done = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), OLD_LAYOUT],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"commit {OLD_LAYOUT} is not in this clone: {done.stderr}"
    with tarfile.open(archive) as tar:
        tar.extractall(into / "old", filter="data")
    return into / "old"


def manage(tree: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (
        f"{tree.name}: manage.py {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def environment(database: str, tmp_path: Path) -> dict[str, str]:
    server = server_settings()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    return {
        **keep,
        "DATABASE_URL": f"mysql://{server['user']}:{server['password']}@{server['host']}:"
        f"{server['port']}/{database}",
        "REDIS_URL": "",
        "CELERY_TASK_ALWAYS_EAGER": "true",
        "DEBUG": "true",
        "AUDIT_HMAC_KEY": "layout-migration-test-key",
        "SIMULATOR_OUTPUT_DIR": str(tmp_path / "sim"),
    }


def columns_of_each_table(database: str) -> dict[str, list[str]]:
    with closing(MySQLdb.connect(**server_settings(), database=database)) as connection:
        cursor = connection.cursor()
        cursor.execute("SHOW TABLES")
        tables = sorted(row[0] for row in cursor.fetchall())
        columns: dict[str, list[str]] = {}
        for table in tables:
            cursor.execute(f"SHOW COLUMNS FROM `{table}`")
            columns[table] = [row[0] for row in cursor.fetchall()]
    return columns


def contents(database: str, columns: dict[str, list[str]]) -> dict[str, Counter[str]]:
    """Each table's rows over the given columns (as digests, counted)."""
    rows_of: dict[str, Counter[str]] = {}
    with closing(MySQLdb.connect(**server_settings(), database=database)) as connection:
        cursor = connection.cursor()
        for table, names in columns.items():
            listed = ", ".join(f"`{name}`" for name in names)
            cursor.execute(f"SELECT {listed} FROM `{table}`")  # noqa: S608
            rows_of[table] = Counter(
                hashlib.sha256(repr(row).encode()).hexdigest() for row in cursor.fetchall()
            )
    return rows_of


# A new model adds its content type and permissions (granted to the groups that hold all).
BOOKKEEPING = {"django_content_type", "auth_permission", "auth_group_permissions"}


def test_a_database_of_the_old_layout_migrates_forward_with_nothing_lost(
    database: str, tmp_path: Path
) -> None:
    old = old_release(tmp_path)
    env = environment(database, tmp_path)
    manage(old, env, "migrate", "--noinput")
    manage(old, env, "seed_demo")
    manage(old, env, "shell", "-c", FILL_WITH_THE_OLD_DEMO)
    old_columns = columns_of_each_table(database)
    before = contents(database, old_columns)
    for table in ("recovery_console_attempt", "detection_anomaly", "remediation_advice"):
        assert before[table].total() > 0, f"the old demo left {table} empty: nothing to test"
    assert before["recovery_console_auditentry"].total() > 50

    manage(ROOT, env, "migrate", "--noinput")

    # Today's migrations may add tables and columns; what the old release stored must remain.
    after = contents(database, old_columns)
    lost = {t for t in before if t != "django_migrations" and before[t] - after[t]}
    assert not lost, f"rows lost or changed in {sorted(lost)}"
    added = {t for t in before if t != "django_migrations" and after[t] - before[t]}
    assert added <= BOOKKEEPING, f"rows added to {sorted(added - BOOKKEEPING)}"
    assert "[ ]" not in manage(ROOT, env, "showmigrations")
    assert "audit chain intact" in manage(ROOT, env, "verify_audit")
