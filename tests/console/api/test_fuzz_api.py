"""The whole API fuzzed from its OpenAPI schema (schemathesis), as each role would call it:
viewer, operator, reviewer, approver and admin personal tokens on the console API, a controller
token on the Advisor API. Against a live ASGI server (Daphne, in a subprocess) on the test's
MariaDB and Redis: no answer may be a server error, every answer must match the schema (status,
content type, body), and none may carry a secret or a stack trace.

Bounded for CI (``FUZZ_EXAMPLES`` examples per operation and role, 6 by default); the seed is
printed on a failure and can be replayed with ``FUZZ_SEED``; ``FUZZ_REPORT=FILE`` writes every
failure there. The README says how to run it longer.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import override_settings
from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import settings as hypothesis_settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleet import services as fleet
from recovery_console.console.api.tokens import rotate_token
from remediation import services as remediation
from tests.factories import AdviceFactory, UserFactory, WorkloadFactory

pytestmark = pytest.mark.fuzz
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
SEED = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))
ROLES = ("viewer", "operator", "reviewer", "approver", "admin")
# What an answer must match in the schema, and that no call passes without its credentials.
# (Not schemathesis' guesses of which requests a server "should" accept: a filter naming an id
# that does not exist is refused with 400, which the schema cannot say.)
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    ignored_auth,
]
# Left out: calls that end the caller's own credentials (the rest of the run would be
# unauthenticated), and the check, which runs the scheduler's commands (over SSH to whatever
# host a fuzzed registration names).
LEFT_OUT = {
    ("POST", "/api/v1/token/"),
    ("DELETE", "/api/v1/token/"),
    ("POST", "/api/v1/clusters/{name}/check/"),
}


def _own_cache() -> dict[str, Any]:
    default = settings.CACHES["default"]
    return {**settings.CACHES, "default": {**default, "KEY_PREFIX": uuid.uuid4().hex}}


# The fuzzer sends wrong tokens on purpose (that no call passes without its credentials): with
# the lock-out kept, every call after the twentieth would answer 429 and test nothing. Webhooks
# and telemetry it registers may only point at this machine: nothing it does leaves it.
@override_settings(
    TOKEN_FAILURE_LIMIT=1_000_000,
    CACHES=_own_cache(),
    OUTBOUND_ALLOWED_HOSTS=["127.0.0.1", "localhost"],
)
class ApiFuzzTests(ChannelsLiveServerTestCase):  # type: ignore[misc]
    serialized_rollback = False

    @classmethod
    def setUpClass(cls) -> None:
        # The server process names its database "test_" + NAME unless TEST NAME is set; under
        # pytest-django NAME already is the test database.
        database = settings.DATABASES["default"]
        database.setdefault("TEST", {})["NAME"] = database["NAME"]
        super().setUpClass()

    def setUp(self) -> None:
        super().setUp()
        cluster = fleet.create_cluster("user:admin", "research")
        workload = WorkloadFactory(cluster=cluster, key="llama-70b")
        AdviceFactory(anomaly__attempt__workload=workload)
        for role in ROLES:
            Group.objects.get_or_create(name=role)
        self.tokens = {
            role: rotate_token(UserFactory(username=f"fuzz-{role}", roles=[role])).key
            for role in ROLES
        }
        issued = remediation.issue_controller_token("user:admin", cluster, "fuzz")
        self.controller_secret = issued.secret
        self.secrets = [*self.tokens.values(), issued.secret, settings.SECRET_KEY]
        self.secrets.append(settings.AUDIT_HMAC_KEY)

    def test_no_role_gets_a_server_error_or_an_answer_outside_the_schema(self) -> None:
        schema = schemathesis.openapi.from_url(
            f"{self.live_server_url}/api/v1/schema/",
            headers={"Authorization": f"Token {self.tokens['admin']}"},
        )
        callers = [(role, f"Token {token}") for role, token in self.tokens.items()]
        callers.append(("controller", f"Bearer {self.controller_secret}"))
        failures: list[str] = []
        for operation in self._operations(schema):
            for role, authorization in callers:
                if role == "controller" and "/advisor/" not in operation.path:
                    continue
                failures.extend(self._fuzz(operation, role, authorization))
        if os.environ.get("FUZZ_REPORT"):
            Path(os.environ["FUZZ_REPORT"]).write_text("\n\n".join(failures))
        assert not failures, f"FUZZ_SEED={SEED}\n" + "\n".join(failures[:20])

    def _operations(self, schema: Any) -> list[Any]:
        found = []
        for result in schema.get_all_operations():
            operation = result.ok()
            if (operation.method.upper(), operation.path) not in LEFT_OUT:
                found.append(operation)
        assert len(found) > 50, [f"{o.method} {o.path}" for o in found]
        return found

    def _fuzz(self, operation: Any, role: str, authorization: str) -> list[str]:
        failures: list[str] = []
        headers = {"Authorization": authorization}

        @seed(SEED)
        @hypothesis_settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            _aim_at_the_fixtures(case)
            response = case.call(base_url=self.live_server_url, headers=headers)
            problem = _problem(case, response, self.secrets, headers)
            if problem:
                again = case.as_curl_command(headers={"Authorization": "[token]"})
                failures.append(f"{role} {case.method} {case.formatted_path}: {problem}\n{again}")

        call()
        return failures


def _aim_at_the_fixtures(case: Any) -> None:
    # Half the time a path names the cluster the fixtures made, so views past the 404 run.
    if case.path_parameters and random.Random(repr(case.path_parameters)).random() < 0.5:  # noqa: S311
        for name in ("name", "cluster"):
            if name in case.path_parameters:
                case.path_parameters[name] = "research"
        if "id" in case.path_parameters:
            case.path_parameters["id"] = 1


def _problem(case: Any, response: Any, secrets: list[str], headers: dict[str, str]) -> str:
    if response.status_code >= 500:
        return f"server error {response.status_code}: {response.text[:300]}"
    body = response.text
    if "Traceback (most recent call last)" in body:
        return "a stack trace in the answer"
    leaked = [s for s in secrets if s and s in body and not _shown_on_purpose(case)]
    if leaked:
        return "a secret in the answer"
    check: Callable[..., Any] = case.validate_response
    try:
        check(response, checks=CHECKS, headers=headers)
    except BaseExceptionGroup as failures:  # schemathesis' group of the checks that failed
        found = "; ".join(
            f"{getattr(f, 'instance_path', '')} {getattr(f, 'message', '') or f}"
            for f in failures.exceptions
        )
        return f"{response.status_code}: {found[:900]}"
    return ""


def _shown_on_purpose(case: Any) -> bool:
    # Issuing a personal token shows its key once; that is the point of the call.
    return case.path == "/api/v1/token/" and case.method.upper() == "POST"
