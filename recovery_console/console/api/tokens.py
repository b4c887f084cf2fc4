"""Personal API tokens for REST clients (``Authorization: Token <key>``), one per person.

Kept apart from the controllers' ``Bearer`` tokens, which are scoped to a cluster. Issuing,
rotating and revoking are audited; the key itself never enters the trail."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework.authtoken.models import Token

from recovery_console.console.reviews import actor_of
from recovery_console.fleet import audit


@transaction.atomic
def rotate_token(user: Any) -> Token:
    """Issue the user's token, replacing (and so revoking) any earlier one."""
    replaced = Token.objects.filter(user=user).delete()[0] > 0
    token = Token.objects.create(user=user)
    verb = "api_token.rotated" if replaced else "api_token.issued"
    audit.record(actor_of(user), verb, user, payload={"user": user.username})
    return token


@transaction.atomic
def revoke_token(user: Any) -> bool:
    """Revoke the user's token; False when there was none."""
    revoked = Token.objects.filter(user=user).delete()[0] > 0
    if revoked:
        audit.record(actor_of(user), "api_token.revoked", user, payload={"user": user.username})
    return revoked
