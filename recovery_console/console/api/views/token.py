"""Your personal API token."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from recovery_console.console.api import serializers as s
from recovery_console.console.models import PersonalToken

from ..tokens import revoke_token, rotate_token


class TokenView(APIView):
    """Your personal API token, for REST clients: ``Authorization: Token <key>``."""

    # Any logged-in person, role or not: a token only ever carries its owner's roles.
    permission_classes = (IsAuthenticated,)

    @extend_schema(responses=s.TokenStatusSerializer)
    def get(self, request: Request) -> Response:
        """Whether you have a token, and since when. The key is only shown when issued."""
        user: Any = request.user
        token = PersonalToken.objects.filter(user=user).first()
        data = {"exists": token is not None, "created": token.created if token else None}
        return Response(s.TokenStatusSerializer(data).data)

    @extend_schema(request=None, responses={201: s.TokenSerializer})
    def post(self, request: Request) -> Response:
        """Create your token, or rotate it: the previous key stops working at once."""
        token = rotate_token(request.user)  # the key is shown this once
        data = s.TokenSerializer({"key": token.key, "created": token.created}).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        """Revoke your token."""
        revoke_token(request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
