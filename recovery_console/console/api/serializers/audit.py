"""The audit trail and the state of its chain."""

from __future__ import annotations

from rest_framework import serializers

from fleet.models import AuditEntry

from .common import cluster_name_field


class AuditEntrySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    # Entries about people (a token issued) belong to no cluster.
    cluster = cluster_name_field(nullable=True)

    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "sequence",
            "at",
            "actor",
            "cluster",
            "workload",
            "attempt",
            "verb",
            "object_type",
            "object_id",
            "payload",
            # With the hashes a client can verify the chain itself, not just ask ``chain``.
            "previous_hash",
            "entry_hash",
        )


# One list for both formats: a field added to the JSON shows up in the CSV too.
AUDIT_CSV_COLUMNS = AuditEntrySerializer.Meta.fields


class ChainStatusSerializer(serializers.Serializer):  # type: ignore[type-arg]
    intact = serializers.BooleanField()
    checked = serializers.IntegerField()
    broken_sequence = serializers.IntegerField(allow_null=True)
    broken_entry_id = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()
