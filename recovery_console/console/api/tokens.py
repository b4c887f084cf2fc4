"""Personal API tokens for REST clients (``Authorization: Token <key>``), one per person.

Kept apart from the controllers' ``Bearer`` tokens, which are scoped to a cluster. Only a
token's SHA-256 is stored: the key is shown once, when issued. Issuing, rotating and revoking
are audited; the key itself never enters the trail."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.request import Request

from fleet import audit, throttle
from recovery_console.console.models import PersonalToken
from recovery_console.console.reviews import actor_of


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    key: str  # shown once
    created: datetime


@transaction.atomic
def rotate_token(user: Any) -> IssuedToken:
    """Issue the user's token, replacing (and so revoking) any earlier one."""
    replaced = PersonalToken.objects.filter(user=user).delete()[0] > 0
    key = secrets.token_hex(20)
    token = PersonalToken.objects.create(
        user=user, digest=token_digest(key), created=timezone.now()
    )
    verb = "api_token.rotated" if replaced else "api_token.issued"
    audit.record(actor_of(user), verb, user, payload={"user": user.username})
    return IssuedToken(key, token.created)


@transaction.atomic
def revoke_token(user: Any) -> bool:
    """Revoke the user's token; False when there was none."""
    revoked = PersonalToken.objects.filter(user=user).delete()[0] > 0
    if revoked:
        audit.record(actor_of(user), "api_token.revoked", user, payload={"user": user.username})
    return revoked


class PersonalTokenAuthentication(TokenAuthentication):
    """``Token <key>``, looked up by its digest. A client address that sends too many wrong
    keys is refused for a while, whatever it sends."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        self.address = str(request.META.get("REMOTE_ADDR", ""))
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if throttle.locked("token", self.address):
            raise exceptions.Throttled(detail="Too many invalid tokens from this address.")
        token = (
            PersonalToken.objects.select_related("user").filter(digest=token_digest(key)).first()
        )
        if token is None:
            throttle.failed("token", self.address)
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return token.user, token
