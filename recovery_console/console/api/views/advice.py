"""Advice and reviewers' labels on it."""

from __future__ import annotations

from typing import ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from recovery_console.console import reviews
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.models import Review
from recovery_console.console.roles import REVIEWER
from remediation.models import Advice

from .common import REFUSED, ReadOnlyViewSet, refusal


class AdviceViewSet(ReadOnlyViewSet):
    """Advice: what the policy recommends for each anomaly, and how far it got."""

    queryset = Advice.objects.select_related("cluster")
    serializer_class = s.AdviceSerializer
    filterset_class = f.AdviceFilterSet
    verb_roles: ClassVar = {"label": REVIEWER}

    @extend_schema(request=s.LabelSerializer, responses={200: s.ReviewSerializer, **REFUSED})
    @action(detail=True, methods=["post"])
    def label(self, request: Request, pk: str) -> Response:
        """Label the advice (reviewer): agree, or disagree with the action you would have
        taken. Labelling again replaces your label."""
        payload = s.LabelSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            review = reviews.label_advice(request.user, self.get_object(), **payload.validated_data)
        except reviews.ApprovalRefused as exc:
            return refusal(exc)
        # The service's contradictions (agreeing yet preferring another action) are input errors.
        except ValueError as exc:
            return Response({"preferred_action": [str(exc)]}, status=400)
        return Response(s.ReviewSerializer(review).data)


class ReviewViewSet(ReadOnlyViewSet):
    """Reviewers' labels on advice."""

    queryset = Review.objects.select_related("reviewer", "advice")
    cluster_field = "advice__cluster"
    serializer_class = s.ReviewSerializer
    filterset_class = f.ReviewFilterSet
