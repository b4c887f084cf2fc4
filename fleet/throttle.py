"""Repeated failed logins lock out what they were aimed at for a while: a user name on the login
page (and wherever a password is checked), a client address for API tokens.

Failures are counted in the shared cache (Redis in production, so every web process sees the
same count) from the first one on; once ``LOGIN_FAILURE_LIMIT`` are counted, even the right
password is refused until ``LOGIN_LOCKOUT_SECONDS`` after that first failure."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

Scope = Literal["password", "token"]


def _key(scope: Scope, who: str) -> str:
    # Hashed: a user name is anything someone typed, and cache keys have rules.
    return f"login-failures:{scope}:{hashlib.sha256(who.lower().encode()).hexdigest()}"


def _limit(scope: Scope) -> int:
    return int(
        settings.LOGIN_FAILURE_LIMIT if scope == "password" else settings.TOKEN_FAILURE_LIMIT
    )


def locked(scope: Scope, who: str) -> bool:
    return int(cache.get(_key(scope, who), 0)) >= _limit(scope)


def failed(scope: Scope, who: str) -> None:
    key = _key(scope, who)
    # The window starts at the first failure; counting on does not extend it.
    cache.add(key, 0, timeout=settings.LOGIN_LOCKOUT_SECONDS)
    try:
        cache.incr(key)
    except ValueError:  # the window ended between the two calls: this failure opens a new one
        cache.add(key, 1, timeout=settings.LOGIN_LOCKOUT_SECONDS)


def succeeded(scope: Scope, who: str) -> None:
    cache.delete(_key(scope, who))


class ThrottledModelBackend(ModelBackend):
    """Django's user/password check, refusing a user name that failed too often lately."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is None:
            username = kwargs.get("username")
        if username is None or password is None:
            return None  # not a password login
        name = str(username)
        if locked("password", name):
            # Stops the other backends too; ``authenticate`` answers None.
            raise PermissionDenied("too many failed logins")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            failed("password", name)
        else:
            succeeded("password", name)
        return user
