"""Fields and small inputs that several resources' payloads share."""

from __future__ import annotations

from rest_framework import serializers

from detection.core.losses import GpuHoursLost


# Clusters are named in URLs and filters, so payloads name them too rather than give a pk.
def cluster_name_field(nullable: bool = False) -> serializers.SlugRelatedField:  # type: ignore[type-arg]
    return serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=nullable)


def username_field(nullable: bool = False) -> serializers.SlugRelatedField:  # type: ignore[type-arg]
    return serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=nullable)


class GpuHoursLostSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Idle GPU-hours (held without progress, or waiting for the next attempt) and recomputed
    ones (a failed attempt's work since its last checkpoint; 0 when no checkpoint was seen)."""

    idle = serializers.FloatField()
    recompute = serializers.FloatField()
    total = serializers.FloatField()


def lost_as_json(lost: GpuHoursLost) -> dict[str, float]:
    return {"idle": lost.idle, "recompute": lost.recompute, "total": lost.total}


class NoteSerializer(serializers.Serializer):  # type: ignore[type-arg]
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)


class ReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(max_length=5000)


# Going back to monitor mode must never be held up for want of a reason.
class OptionalReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
