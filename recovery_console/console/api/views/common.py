"""What every resource's viewset shares: the role checks, and refusals as HTTP answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from recovery_console.console import reviews
from recovery_console.console.api import serializers as s
from recovery_console.console.roles import VIEWER, HasRole, visible

from ..pagination import Cursor

REFUSED = {
    403: OpenApiResponse(description="the role this needs is missing"),
    409: OpenApiResponse(description="the workflow refused the step; `detail` says why"),
}


def refusal(exc: reviews.ApprovalRefused) -> Response:
    # RoleMissing is an ApprovalRefused too: tell it apart first, it is a 403 and not a 409.
    code = status.HTTP_403_FORBIDDEN if isinstance(exc, reviews.RoleMissing) else 409
    return Response({"detail": exc.reason}, status=code)


class RoleViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Reading needs the viewer role; a verb needs the role ``verb_roles`` names for it."""

    verb_roles: ClassVar[dict[str, str]] = {}
    # The path from a row to its cluster, which decides who sees the row.
    cluster_field: ClassVar[str] = "cluster"
    pagination_class = Cursor

    def get_permissions(self) -> list[BasePermission]:
        # Actions not named, and requests routed to no action at all, need only the viewer role.
        return [HasRole(self.verb_roles.get(self.action or "", VIEWER))()]

    def get_queryset(self) -> QuerySet[Any]:
        return visible(super().get_queryset(), self.request.user, VIEWER, self.cluster_field)


class ReadOnlyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, RoleViewSet):
    pass


# A settings change that waits for a second person.
PENDING_APPROVAL = OpenApiResponse(
    s.PolicyChangeRequestSerializer,
    description="not applied yet: a second person with the approver role must approve the "
    "request (it touches the approval gate, or the cluster acts)",
)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the workflow refused the step"


@contextmanager
def model_refusals_as_400() -> Iterator[None]:
    """A model's refusal (Django's ValidationError) as DRF's: a 400 naming each field."""
    try:
        yield
    except ModelValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        raise ValidationError(detail) from exc
