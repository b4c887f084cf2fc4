"""Guessing passwords: after a few failed logins the user name is locked out, the right
password included, until the window passes."""

import time

import pytest
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
RIGHT = "a long and correct horse"


@pytest.fixture
def olga(settings):
    # A fast hasher, so the failures fall well inside a short window.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return UserFactory(username="olga", password=RIGHT)


def log_in(client: Client, password: str, username: str = "olga"):  # type: ignore[no-untyped-def]
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_after_repeated_failures_even_the_right_password_is_refused(olga, settings) -> None:
    settings.LOGIN_FAILURE_LIMIT, settings.LOGIN_LOCKOUT_SECONDS = 5, 2
    client = Client()
    for n in range(5):
        assert log_in(client, f"guess {n}").status_code == 200
    refused = log_in(client, RIGHT)
    assert refused.status_code == 200
    assert "_auth_user_id" not in client.session
    assert "Too many failed logins for this user name" in refused.content.decode()
    time.sleep(2.1)  # the window passes
    assert log_in(client, RIGHT).status_code == 302
    assert client.session["_auth_user_id"] == str(olga.pk)


def test_a_success_clears_the_count_and_other_names_are_not_concerned(olga, settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = 3
    UserFactory(username="rita", password=RIGHT)
    client = Client()
    for _ in range(2):
        log_in(client, "wrong")
    assert log_in(client, RIGHT).status_code == 302
    for _ in range(2):
        log_in(Client(), "wrong")
    assert log_in(Client(), RIGHT).status_code == 302  # 2 failures since the success
    for _ in range(3):
        log_in(Client(), "wrong", username="OLGA")  # the same name, however it is written
    assert log_in(Client(), RIGHT).status_code == 200
    assert log_in(Client(), RIGHT, username="rita").status_code == 302


def test_the_admin_login_is_throttled_too(olga, settings) -> None:
    settings.LOGIN_FAILURE_LIMIT = 2
    olga.is_staff = True
    olga.save()
    client = Client()
    for _ in range(2):
        client.post("/admin/login/", {"username": "olga", "password": "wrong"})
    client.post("/admin/login/", {"username": "olga", "password": RIGHT})
    assert "_auth_user_id" not in client.session
