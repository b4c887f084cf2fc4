"""REST payloads of the console API, one module per resource. Rows are read-only here: every
write goes through a service, and the input serializers only validate what a verb needs."""

from .advice import AdviceSerializer, LabelSerializer, ReviewSerializer
from .anomalies import AnomalySerializer, TelemetryGapSerializer
from .approvals import ModeChangeRequestSerializer, PolicyChangeRequestSerializer
from .audit import AUDIT_CSV_COLUMNS, AuditEntrySerializer, ChainStatusSerializer
from .clusters import (
    AgreementSerializer,
    CheckSerializer,
    ClusterLossesSerializer,
    ClusterRegistrationSerializer,
    ClusterSerializer,
    ClusterSettingsSerializer,
    DayAgreementSerializer,
    FindingSerializer,
    PrecisionRowSerializer,
    PrecisionSerializer,
    ReporterHealthSerializer,
    RuleEditSerializer,
    RuleProposalSerializer,
)
from .common import (
    GpuHoursLostSerializer,
    NoteSerializer,
    OptionalReasonSerializer,
    ReasonSerializer,
)
from .nodes import NodeHealthSerializer, NodeListSerializer, NodeSerializer
from .notifications import NotificationChannelSerializer
from .tokens import TokenSerializer, TokenStatusSerializer
from .workloads import AttemptSerializer, WorkloadSerializer

__all__ = [
    "AUDIT_CSV_COLUMNS",
    "AdviceSerializer",
    "AgreementSerializer",
    "AnomalySerializer",
    "AttemptSerializer",
    "AuditEntrySerializer",
    "ChainStatusSerializer",
    "CheckSerializer",
    "ClusterLossesSerializer",
    "ClusterRegistrationSerializer",
    "ClusterSerializer",
    "ClusterSettingsSerializer",
    "DayAgreementSerializer",
    "FindingSerializer",
    "GpuHoursLostSerializer",
    "LabelSerializer",
    "ModeChangeRequestSerializer",
    "NodeHealthSerializer",
    "NodeListSerializer",
    "NodeSerializer",
    "NoteSerializer",
    "NotificationChannelSerializer",
    "OptionalReasonSerializer",
    "PolicyChangeRequestSerializer",
    "PrecisionRowSerializer",
    "PrecisionSerializer",
    "ReasonSerializer",
    "ReporterHealthSerializer",
    "ReviewSerializer",
    "RuleEditSerializer",
    "RuleProposalSerializer",
    "TelemetryGapSerializer",
    "TokenSerializer",
    "TokenStatusSerializer",
    "WorkloadSerializer",
]
