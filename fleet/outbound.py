"""The site's secret store and outbound hosts, from the settings (see ``core.outbound``)."""

from __future__ import annotations

from django.conf import settings

from .core.outbound import SecretStore


def secret_store() -> SecretStore:
    return SecretStore(env_prefix=settings.SECRET_ENV_PREFIX, directory=settings.SECRETS_DIR)


def allowed_hosts() -> tuple[str, ...]:
    return tuple(settings.OUTBOUND_ALLOWED_HOSTS)
