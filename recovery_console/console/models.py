"""The console's own rows: reviewers' labels on advice, requests for action mode, and where
each cluster's notifications go. Written only by ``reviews``, ``approval`` and
``notifications.channels``."""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator, URLValidator
from django.db import models

from fleet.core.outbound import url_host, url_problem
from fleet.core.taxonomy import ACTION_LABELS, Action, choices
from fleet.models import Cluster
from fleet.outbound import allowed_hosts


class Review(models.Model):
    """A reviewer's label on one advice: whether they agree, and what they would have done.

    One per (advice, reviewer); labelling again updates it. ``generation`` is the advice's
    generation the reviewer saw: when sharper evidence revises the advice, the old label no
    longer counts towards the agreement rate and the advice is back in the review queue."""

    # PROTECT: the labels are the evidence an approval rested on, so their advice stays.
    advice = models.ForeignKey(
        "remediation.Advice", on_delete=models.PROTECT, related_name="reviews"
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reviews"
    )
    agrees = models.BooleanField()
    preferred_action = models.CharField(max_length=32, choices=choices(Action, ACTION_LABELS))
    comment = models.TextField(blank=True)
    generation = models.PositiveIntegerField(default=1)
    # Set by ``reviews``: ``updated_at`` is the label's time, which the agreement window uses.
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["advice", "reviewer"], name="review_one_per_reviewer")
        ]
        ordering: ClassVar = ["-updated_at"]

    def __str__(self) -> str:
        verdict = "agrees" if self.agrees else f"prefers {self.preferred_action}"
        return f"{self.reviewer} on advice {self.advice_id}: {verdict}"


class ModeRequestStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class ModeChangeRequest(models.Model):
    """A request to switch a cluster to action mode, with the agreement measured when it was
    made. A second person with the approver role decides it; approval measures again."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="mode_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="mode_requests"
    )
    requested_at = models.DateTimeField()
    note = models.TextField(blank=True)
    # Taken when asked, for the approver to compare; approval measures again. Null: none labelled.
    agreement_rate = models.FloatField(null=True, blank=True)
    labelled = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=ModeRequestStatus.choices, default=ModeRequestStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="mode_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["-requested_at"]
        # A cluster's pending request is looked up by every mode page and overview card.
        indexes: ClassVar = [models.Index(fields=["cluster", "status"])]
        # Approving is its own permission, apart from requesting: they can go to different people.
        permissions: ClassVar = [
            ("approve_modechangerequest", "Can approve or reject a request for action mode"),
            ("return_to_monitor", "Can return a cluster to monitor mode"),
        ]

    def __str__(self) -> str:
        return f"action mode for {self.cluster_id}: {self.status}"


class PolicyChangeRequest(models.Model):
    """A change of a cluster's settings that applies only once a second person with the
    approver role approves it: one that touches the approval gate (``approval_*``), or any
    change of the policy or the allowlist while the cluster is in action mode. ``base`` holds
    those settings as they were when asked: approval is refused if they moved since."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="policy_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="policy_requests"
    )
    requested_at = models.DateTimeField()
    # The settings asked for ({"policy": {...}, ...}), validated when asked and again on approval.
    changes = models.JSONField()
    base = models.JSONField()
    # Why it needs a second person, in words, for the approver.
    why = models.JSONField(default=list)
    note = models.TextField(blank=True)
    status = models.CharField(
        max_length=16, choices=ModeRequestStatus.choices, default=ModeRequestStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="policy_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["-requested_at"]
        indexes: ClassVar = [models.Index(fields=["cluster", "status"])]

    def __str__(self) -> str:
        return f"settings change for {self.cluster_id}: {self.status}"


class NotificationEvent(models.TextChoices):
    STOP = "stop", "Stop advised"
    DRAIN = "drain", "Node drained"
    MODE_CHANGE = "mode_change", "Cluster mode changed"
    REVIEW_NEEDED = "review_needed", "Advice waiting for review"
    TELEMETRY_GAP = "telemetry_gap", "Telemetry source down, silent or late"
    REPORTER_SILENT = "reporter_silent", "Controller or watchdog silent"


class NotificationKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON, Slack-compatible)"
    SLACK = "slack", "Slack incoming webhook (text and blocks)"
    EMAIL = "email"


# Both post JSON to a URL; they differ only in the body's shape.
WEBHOOK_KINDS = (NotificationKind.WEBHOOK, NotificationKind.SLACK)


# A named function, not a lambda: migrations must be able to refer to the default.
def _all_notification_events() -> list[str]:
    return list(NotificationEvent.values)


class NotificationChannel(models.Model):
    """Where a cluster's notifications go: a webhook URL or a comma-separated list of email
    addresses, and which events (``NotificationEvent`` values) it wants."""

    # CASCADE, unlike the rows above: a channel is configuration, not history.
    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="notification_channels"
    )
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    target = models.CharField(max_length=1000)
    events = models.JSONField(default=_all_notification_events, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["cluster", "id"]

    def __str__(self) -> str:
        # Logged: never the webhook's secret path.
        return f"{self.kind} {self.safe_target} for {self.cluster_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Checked on every save: no path (API, admin, shell) stores a target delivery chokes on.
        self.full_clean(exclude=["cluster"])
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        events = self.events
        if not isinstance(events, list) or not all(e in NotificationEvent.values for e in events):
            errors["events"] = [f"must be a list of {', '.join(NotificationEvent.values)}"]
        if self.kind in WEBHOOK_KINDS:
            try:
                URLValidator(schemes=["http", "https"])(self.target)
            except ValidationError:
                errors["target"] = ["a webhook needs an http:// or https:// URL"]
            else:
                if problem := url_problem(self.target, allowed_hosts()):
                    errors["target"] = [problem]
        elif self.kind == NotificationKind.EMAIL:
            bad = [a for a in self.recipients if not _is_email(a)]
            if bad or not self.recipients:
                errors["target"] = [f"not an email address: {', '.join(bad) or '(none)'}"]
        if errors:
            raise ValidationError(errors)

    @property
    def safe_target(self) -> str:
        """The target as logs, the trail and viewers see it: a webhook's path and any
        credentials are often its secret (Slack), so only its host."""
        if self.kind in WEBHOOK_KINDS:
            return f"{urlsplit(self.target).scheme}://{url_host(self.target)}/…"
        return self.target

    @property
    def recipients(self) -> list[str]:
        return [a.strip() for a in self.target.split(",") if a.strip()]


def _is_email(address: str) -> bool:
    try:
        EmailValidator()(address)
    except ValidationError:
        return False
    return True


class PersonalToken(models.Model):
    """A person's API token for REST clients. Only its SHA-256 is kept; the key itself is shown
    once, when issued (``api.tokens``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_token"
    )
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField()

    def __str__(self) -> str:
        return f"API token of {self.user}"


class ClusterRole(models.TextChoices):
    """The roles a membership can scope to one cluster (admin is site-wide only)."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    REVIEWER = "reviewer"
    APPROVER = "approver"


class ClusterMembership(models.Model):
    """One role held for one cluster. A person's site-wide role groups still count for every
    cluster; a membership adds a role on one cluster only (see ``console.roles``). Written only
    by ``console.memberships``, which audits each grant and revocation."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cluster_memberships"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=ClusterRole.choices)
    granted_at = models.DateTimeField()
    granted_by = models.CharField(max_length=150)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "cluster", "role"], name="cluster_membership_once"
            )
        ]
        ordering: ClassVar = ["cluster__name", "user__username", "role"]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.cluster}"
