"""Requests for action mode and for settings changes, approved or rejected by a second person."""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from recovery_console.console import approval, policy_approval, reviews
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.models import ModeChangeRequest, PolicyChangeRequest
from recovery_console.console.roles import APPROVER

from .common import REFUSED, ReadOnlyViewSet, refusal


class ModeChangeRequestViewSet(ReadOnlyViewSet):
    """Requests to switch a cluster to action mode, and their decisions."""

    queryset = ModeChangeRequest.objects.select_related("cluster", "requested_by", "decided_by")
    serializer_class = s.ModeChangeRequestSerializer
    filterset_class = f.ModeChangeRequestFilterSet
    # Rejecting is also open to the requester (withdrawing): the service checks who.
    verb_roles: ClassVar = {"approve": APPROVER}

    @extend_schema(request=None, responses={200: s.ModeChangeRequestSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve (approver, not the requester), while the agreement measured now meets the
        policy; the cluster then switches to action mode."""
        try:
            decided = approval.approve_mode_request(request.user, self.get_object())
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.ModeChangeRequestSerializer(decided).data)

    @extend_schema(
        request=s.ReasonSerializer, responses={200: s.ModeChangeRequestSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject (approver) or withdraw (the requester), saying why."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            decided = approval.reject_mode_request(
                request.user, self.get_object(), payload.validated_data["reason"]
            )
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.ModeChangeRequestSerializer(decided).data)


class PolicyChangeRequestViewSet(ReadOnlyViewSet):
    """Settings changes waiting for (or decided by) a second person: those that touch the
    approval gate, or the policy or allowlist of a cluster in action mode."""

    queryset = PolicyChangeRequest.objects.select_related("cluster", "requested_by", "decided_by")
    serializer_class = s.PolicyChangeRequestSerializer
    filterset_class = f.PolicyChangeRequestFilterSet
    verb_roles: ClassVar = {"approve": APPROVER}

    @extend_schema(request=None, responses={200: s.PolicyChangeRequestSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve and apply (approver, not the requester), while the settings it changes are
        as they were when asked."""
        try:
            decided = policy_approval.approve_policy_request(request.user, self.get_object())
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.PolicyChangeRequestSerializer(decided).data)

    @extend_schema(
        request=s.ReasonSerializer, responses={200: s.PolicyChangeRequestSerializer, **REFUSED}
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject (approver) or withdraw (the requester), saying why."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            decided = policy_approval.reject_policy_request(
                request.user, self.get_object(), payload.validated_data["reason"]
            )
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        return Response(s.PolicyChangeRequestSerializer(decided).data)
