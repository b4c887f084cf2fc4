"""Shared fixtures. Tests run against the database and Redis named by DATABASE_URL and REDIS_URL
(MariaDB and Redis under `make test`)."""

import uuid
from collections.abc import Iterator

import pytest

from recovery_console.celery import app as celery_app


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    """Tasks run in-process unless a test asks for a real worker."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = True


@pytest.fixture(autouse=True)
def own_cache_keys(settings) -> None:
    """Each test's cache keys (login failures, cycle leases) are its own, also apart from a
    parallel test process's on the same Redis."""
    default = settings.CACHES["default"]
    settings.CACHES = {**settings.CACHES, "default": {**default, "KEY_PREFIX": uuid.uuid4().hex}}


def drop_audit_triggers() -> None:
    from django.db import connection

    from fleet.audit import drop_append_only_triggers

    with connection.cursor() as cursor:
        drop_append_only_triggers(cursor.execute, connection.vendor)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: object) -> None:
    """The migrations install MySQL triggers that refuse DELETE on the audit table, and a
    transactional test's flush deletes every row: tests run without them (the model still
    refuses), and the tests of the triggers install them for themselves."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        drop_audit_triggers()


@pytest.fixture(autouse=True)
def no_audit_triggers_after(request: pytest.FixtureRequest) -> Iterator[None]:
    """A transactional test that migrated to the latest state installed them again."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is not None and marker.kwargs.get("transaction"):
        drop_audit_triggers()
