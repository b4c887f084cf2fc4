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
