"""Controller authentication: ``Authorization: Bearer <token>``, each token scoped to one
cluster. Kept apart from people's logins and personal API tokens."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from fleet import throttle
from remediation.models import ControllerToken
from remediation.services import authenticate_controller


class ControllerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[ControllerToken, ControllerToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "the Authorization header must be 'Bearer <token>'"
            )
        # An address that sent too many wrong tokens is refused a while, whatever it sends.
        address = str(request.META.get("REMOTE_ADDR", ""))
        if throttle.locked("token", address):
            raise exceptions.Throttled(detail="Too many invalid tokens from this address.")
        token = authenticate_controller(header[1].decode(errors="replace"))
        if token is None:
            throttle.failed("token", address)
            raise exceptions.AuthenticationFailed("unknown or revoked controller token")
        # The token is the request's user as well (it answers is_authenticated).
        return token, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class IsController(permissions.BasePermission):
    """Any controller token (for the one view that names no cluster)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ControllerToken)


class IsControllerOfCluster(permissions.BasePermission):
    """A controller token acts on its own cluster only: another cluster's URL gets 403."""

    message = "this controller token belongs to another cluster"

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ControllerToken):
            return False
        # A leaked token reaches its own cluster only, never the others the console runs.
        return bool(token.cluster.name == view.kwargs.get("cluster"))


class ControllerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "remediation.advisor.authentication.ControllerTokenAuthentication"
    name = "controllerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A controller token (rcc_...)"}
