"""Shared fixtures. Tests run against the database and Redis named by DATABASE_URL and REDIS_URL
(MariaDB and Redis under `make test`)."""

from collections.abc import Iterator

import pytest

from recovery_console.celery import app as celery_app


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    """Tasks run in-process unless a test asks for a real worker."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = True
