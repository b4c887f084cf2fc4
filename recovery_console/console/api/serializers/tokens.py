"""Personal API tokens."""

from __future__ import annotations

from rest_framework import serializers


class TokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A personal API token: send it as ``Authorization: Token <key>``. Shown once."""

    key = serializers.CharField()
    created = serializers.DateTimeField()


# Never the key: it is shown once, when issued.
class TokenStatusSerializer(serializers.Serializer):  # type: ignore[type-arg]
    exists = serializers.BooleanField()
    created = serializers.DateTimeField(allow_null=True)
