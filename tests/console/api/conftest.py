"""People with each role, API clients logged in as them, and a cluster with some history."""

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from fleet import services
from tests.factories import AdviceFactory, UserFactory

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PEOPLE = {
    "carol": ["viewer"],
    "olga": ["operator"],
    "rita": ["reviewer"],
    "alice": ["operator", "reviewer"],
    "bob": ["approver", "reviewer"],
    "dave": ["approver"],
    "root": ["admin"],
    "nobody": [],
}


@pytest.fixture
def people():
    return {name: UserFactory(username=name, roles=roles) for name, roles in PEOPLE.items()}


@pytest.fixture
def api(people):
    """``api("carol")`` is a client logged in as carol; ``api(None)`` is anonymous."""

    def client_for(name: str | None) -> APIClient:
        client = APIClient()
        if name is not None:
            client.force_login(people[name])
        return client

    return client_for


@pytest.fixture
def cluster():
    return services.create_cluster("user:root", "research")


def advice_on(cluster, **fields):
    return AdviceFactory(anomaly__attempt__workload__cluster=cluster, **fields)
