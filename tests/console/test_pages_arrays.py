"""An array's tasks are listed under the array: one row in the workload list, a page listing
each task (its own run), and each task's page pointing back to its array."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobState
from fleet.models import Workload
from tests.factories import JobRecordFactory, UserFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def viewer(client):
    client.force_login(UserFactory(roles=["viewer"]))
    return client


@pytest.fixture
def array():
    cluster = services.create_cluster("user:alice", "research")
    tasks = [JobRecordFactory(job_id=f"900_{n}", name="sweep") for n in range(3)]
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (*tasks,), ()))
    failed = replace(tasks[1], state=JobState.FAILED, exit_code=1, end_time=T0)
    requeued = replace(tasks[1], restart_count=1)
    later = T0 + timedelta(seconds=10)
    services.record_snapshot("test", cluster, ClusterSnapshot(later, (failed,), ()))
    services.record_snapshot("test", cluster, ClusterSnapshot(later, (requeued,), ()))
    return Workload.objects.get(key="sweep[]")


def test_the_workload_list_shows_the_array_once_with_its_tasks(viewer, array) -> None:
    page = viewer.get("/workloads/").content.decode()
    assert "sweep[]" in page and 'data-array-tasks="3"' in page
    assert "sweep[1]" not in page  # the tasks are on the array's page
    assert "1 workload" in page


def test_the_array_page_lists_each_task_with_its_own_attempts(viewer, array) -> None:
    page = viewer.get(f"/workloads/{array.pk}/").content.decode()
    rows = {t.key: t for t in array.tasks.all()}
    assert set(rows) == {"sweep[0]", "sweep[1]", "sweep[2]"}
    for key, task in rows.items():
        assert f'href="/workloads/{task.pk}/">{key}</a>' in page
    # Task 1 was requeued once: two attempts; its siblings have one each.
    assert page.count('<td class="num">2</td>') == 1


def test_a_task_page_points_back_to_its_array(viewer, array) -> None:
    task = array.tasks.get(key="sweep[1]")
    page = viewer.get(f"/workloads/{task.pk}/").content.decode()
    assert f'href="/workloads/{array.pk}/" data-array-link>sweep[]</a>' in page
    assert "900_1" in page
