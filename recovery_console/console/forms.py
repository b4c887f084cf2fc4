"""The console's forms. They parse and check what a person typed; the services decide and write.

JSON documents (policy, signatures, detector knobs) are edited as text: a parse error is shown
next to its field, and the services' own validation errors are mapped back onto the fields.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.template.defaultfilters import filesizeformat

from detection.core.constants import DEFAULT_GPUS_PER_NODE
from detection.core.sharding import MAX_SCAN_SHARDS, MIN_SCAN_SHARDS
from fleet import throttle
from fleet.core.outbound import redacted
from fleet.core.taxonomy import ACTION_CHOICES
from fleet.models import Cluster, WorkloadState
from fleet.services import REGISTRATION_FIELDS
from recovery_console.jsonbodies import JsonTooDeep, loads_bounded

JSON_ATTRS = {"rows": 10, "spellcheck": "false", "class": "code"}


class ClusterChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A cluster chosen by name, so filter URLs read ``?cluster=demo``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("empty_label", "all clusters")
        super().__init__(queryset=Cluster.objects.all(), to_field_name="name", **kwargs)


class WorkloadFilterForm(forms.Form):
    cluster = ClusterChoiceField()
    state = forms.ChoiceField(choices=[("", "any state"), *WorkloadState.choices], required=False)
    q = forms.CharField(required=False, max_length=200, label="Search")


class AuditFilterForm(forms.Form):
    """Filters of the audit trail; the same names as the API's, so export links reuse them."""

    cluster = ClusterChoiceField()
    actor = forms.CharField(required=False, max_length=150)
    verb = forms.CharField(required=False, max_length=64)
    object_type = forms.CharField(required=False, max_length=64, label="Object type")
    object_id = forms.CharField(required=False, max_length=64, label="Object id")
    workload = forms.IntegerField(required=False, min_value=1)
    # datetime-local sends no zone: the times are read in the site's ``TIME_ZONE``.
    created__after = forms.DateTimeField(
        required=False,
        label="At or after",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    created__before = forms.DateTimeField(
        required=False,
        label="Before",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


def _json(value: str, field: str, expected: type) -> Any:
    text = value.strip()
    if not text:
        # An empty box means the defaults, stored as an empty document.
        return expected()
    try:
        parsed = loads_bounded(text)
    except JsonTooDeep as exc:
        raise ValidationError(str(exc)) from exc
    except ValueError as exc:
        raise ValidationError(f"not valid JSON: {exc}") from exc
    if not isinstance(parsed, expected):
        kind = "an object {…}" if expected is dict else "a list […]"
        raise ValidationError(f"{field} must be {kind}")
    return parsed


def _pretty(value: Any) -> str:
    # Sorted, so a document reads the same on every visit whatever order it was saved in.
    return json.dumps(value, indent=2, sort_keys=True)


# Which service each field goes to: the cluster's, or the detector's.
CLUSTER_FIELDS = ("partitions_allowlist", "policy")
DETECTION_FIELDS = (
    "signatures",
    "progress_pattern",
    "hang",
    "straggler",
    "poll_seconds",
    "scan_shards",
)


class ClusterDocumentsForm(forms.Form):
    """What the settings and the registration forms share: the allowlist and the policy, and
    the services' errors put back next to their fields."""

    partitions_allowlist = forms.CharField(
        required=False,
        label="Partitions allowlist",
        help_text="Partitions action mode may touch, one per line or comma-separated; "
        "empty means all partitions.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    policy = forms.CharField(
        required=False,
        help_text="The recovery policy document (JSON); empty means the defaults.",
        widget=forms.Textarea(attrs=JSON_ATTRS),
    )

    def clean_partitions_allowlist(self) -> list[str]:
        raw = self.cleaned_data["partitions_allowlist"].replace(",", "\n")
        return [name.strip() for name in raw.splitlines() if name.strip()]

    def clean_policy(self) -> dict[str, Any]:
        return dict(_json(self.cleaned_data["policy"], "the policy", dict))

    def add_service_errors(self, error: ValidationError) -> None:
        """Put a service's per-field messages next to the fields (the rest above the form)."""
        # An error without fields has no ``message_dict``: reading it would raise.
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for field, messages in error.message_dict.items():
            self.add_error(field if field in self.fields else None, messages)


class ClusterSettingsForm(ClusterDocumentsForm):
    """A cluster's allowlist and policy, and its detector settings, in one form."""

    signatures = forms.CharField(
        required=False,
        label="Custom signatures",
        help_text="A JSON list of signature objects with name, pattern (RE2), kind, category, "
        "attribution and role; optional implicates_node, severity, description. They are "
        "checked before the built-in ones.",
        widget=forms.Textarea(attrs=JSON_ATTRS),
    )
    progress_pattern = forms.CharField(
        required=False,
        max_length=500,
        label="Progress-line pattern",
        help_text="An RE2 pattern with a named group (?P<step>…) and optionally "
        "(?P<throughput>…); empty uses the built-in patterns.",
        widget=forms.TextInput(attrs={"class": "code wide", "spellcheck": "false"}),
    )
    hang = forms.CharField(
        required=False,
        label="Hang detector",
        help_text="JSON object of hang-detector settings.",
        widget=forms.Textarea(attrs={**JSON_ATTRS, "rows": 5}),
    )
    straggler = forms.CharField(
        required=False,
        label="Straggler detector",
        help_text="JSON object of straggler-detector settings.",
        widget=forms.Textarea(attrs={**JSON_ATTRS, "rows": 5}),
    )
    poll_seconds = forms.FloatField(label="Poll interval (seconds)", min_value=0)
    scan_shards = forms.IntegerField(
        label="Scan shards",
        min_value=MIN_SCAN_SHARDS,
        max_value=MAX_SCAN_SHARDS,
        help_text="How many Celery tasks share each scan of this cluster (1 for most clusters; "
        "see the README on sizing workers).",
    )

    @classmethod
    def initial_from(cls, cluster: Cluster, detection: Any) -> dict[str, Any]:
        return {
            "partitions_allowlist": "\n".join(cluster.partitions_allowlist),
            "policy": _pretty(cluster.policy) if cluster.policy else "",
            "signatures": _pretty(detection.signatures) if detection.signatures else "",
            "progress_pattern": detection.progress_pattern,
            "hang": _pretty(detection.hang) if detection.hang else "",
            "straggler": _pretty(detection.straggler) if detection.straggler else "",
            "poll_seconds": detection.poll_seconds,
            "scan_shards": detection.scan_shards,
        }

    def clean_signatures(self) -> list[Any]:
        return list(_json(self.cleaned_data["signatures"], "the signatures", list))

    def clean_hang(self) -> dict[str, Any]:
        return dict(_json(self.cleaned_data["hang"], "the hang settings", dict))

    def clean_straggler(self) -> dict[str, Any]:
        return dict(_json(self.cleaned_data["straggler"], "the straggler settings", dict))

    def changes(self, cluster: Cluster, detection: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The changed cluster settings and the changed detection settings."""
        # Only changes go to the services: an unchanged document is neither revalidated nor audited.
        data = self.cleaned_data
        cluster_changes = {f: data[f] for f in CLUSTER_FIELDS if data[f] != getattr(cluster, f)}
        detection_changes = {
            f: data[f] for f in DETECTION_FIELDS if data[f] != getattr(detection, f)
        }
        return cluster_changes, detection_changes


SCHEDULER_EXAMPLE = (
    '{"backend": "slurm", "transport": "ssh", "slurm_conf": "/etc/slurm/slurm.conf",\n'
    ' "ssh": {"host": "slurm-head", "user": "rc", "key": {"file": "head-key"},\n'
    '         "known_hosts": {"file": "head-known-hosts"}}}'
)
TELEMETRY_EXAMPLE = (
    '{"logs": {"type": "files", "path": "/shared/slurm-logs", "pattern": "slurm-*.out"},\n'
    ' "metrics": {"type": "prometheus", "url": "https://prom.example.org",\n'
    '             "token": {"env": "RC_SECRET_PROM_TOKEN"}, "timeout": 10}}'
)


class ClusterRegistrationForm(ClusterDocumentsForm):
    """A cluster's registration (admin): its name when new, then its documents as JSON text.
    The model checks every document (README, "The scheduler document" and "The telemetry
    document"); its problems are shown next to the field they concern."""

    name = forms.SlugField(
        max_length=63,
        help_text="Lower-case letters, digits and -; it names the cluster in URLs and commands.",
    )
    scheduler = forms.CharField(
        required=False,
        help_text="How to reach Slurm; empty means the simulated cluster. Keys by reference "
        "only. For example: " + SCHEDULER_EXAMPLE,
        widget=forms.Textarea(attrs={**JSON_ATTRS, "rows": 8}),
    )
    telemetry = forms.CharField(
        required=False,
        help_text="Where logs and GPU metrics come from; secrets by reference only. For "
        "example: " + TELEMETRY_EXAMPLE,
        widget=forms.Textarea(attrs={**JSON_ATTRS, "rows": 8}),
    )

    def __init__(self, *args: Any, cluster: Cluster | None = None, **kwargs: Any) -> None:
        if cluster is not None:
            kwargs.setdefault("initial", self.initial_from(cluster))
        super().__init__(*args, **kwargs)
        if cluster is not None:
            # The name keys the cluster's history: it is shown, never changed.
            self.fields["name"].disabled = True

    @staticmethod
    def initial_from(cluster: Cluster) -> dict[str, Any]:
        def text(document: Any) -> str:
            return _pretty(redacted(document)) if document else ""

        return {
            "name": cluster.name,
            "scheduler": text(cluster.scheduler),
            "telemetry": text(cluster.telemetry),
            "partitions_allowlist": "\n".join(cluster.partitions_allowlist),
            "policy": _pretty(cluster.policy) if cluster.policy else "",
        }

    def clean_scheduler(self) -> dict[str, Any]:
        return dict(_json(self.cleaned_data["scheduler"], "the scheduler", dict))

    def clean_telemetry(self) -> dict[str, Any]:
        return dict(_json(self.cleaned_data["telemetry"], "the telemetry", dict))

    def documents(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in REGISTRATION_FIELDS}


class TestSignalsForm(forms.Form):
    """A log excerpt to diagnose: pasted or uploaded, optionally with a cluster's signatures."""

    __test__ = False  # not a pytest test class, despite its name

    text = forms.CharField(
        required=False,
        label="Paste a log",
        # Unstripped: leading blank lines are part of the log and count in its line numbers.
        strip=False,
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false", "class": "code"}),
    )
    upload = forms.FileField(required=False, label="or upload a file")
    cluster = ClusterChoiceField(
        empty_label="built-in signatures, default policy",
        label="Judge with the signatures and policy of",
    )
    host = forms.CharField(
        required=False,
        max_length=255,
        label="Node whose own log this is",
        help_text="Optional: names the node for kernel lines (Xid, ECC) that do not.",
    )
    nodes = forms.CharField(
        required=False,
        max_length=4000,
        label="Nodes in rank order",
        help_text="Optional, comma-separated: maps ranks to hosts.",
    )
    tasks_per_node = forms.IntegerField(
        min_value=1, max_value=1024, initial=DEFAULT_GPUS_PER_NODE, label="Tasks (ranks) per node"
    )

    def __init__(self, *args: Any, refused: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused = refused or []

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        limit = settings.MAX_UPLOAD_BYTES
        advice = f"at most {filesizeformat(limit)} is read here: try the end of the log"
        if "upload" in self.refused:
            self.add_error("upload", f"The file is larger than {filesizeformat(limit)}; {advice}.")
        elif len(data.get("text") or "") > limit:
            self.add_error(
                "text", f"The pasted log is larger than {filesizeformat(limit)}; {advice}."
            )
        elif not data.get("text") and not data.get("upload"):
            raise ValidationError("Paste a log or choose a file.")
        return data

    def node_list(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.cleaned_data["nodes"].split(",") if n.strip())


class LabelForm(forms.Form):
    """A reviewer's label: agree, or disagree and name the action they would have taken."""

    verdict = forms.ChoiceField(choices=[("agree", "Agree"), ("disagree", "Disagree")])
    # Optional here: agreeing implies the advised action.
    preferred_action = forms.ChoiceField(choices=[("", "—"), *ACTION_CHOICES], required=False)
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("verdict") == "disagree" and not data.get("preferred_action"):
            self.add_error("preferred_action", "Choose the action you would have taken.")
        return data

    @property
    def agrees(self) -> bool:
        return bool(self.cleaned_data["verdict"] == "agree")


class RequestModeForm(forms.Form):
    note = forms.CharField(
        required=False,
        max_length=2000,
        label="Note for the approver",
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class ReasonForm(forms.Form):
    """Rejecting a request, returning to monitor mode, releasing a node: a reason is needed."""

    reason = forms.CharField(max_length=2000, widget=forms.TextInput(attrs={"size": 40}))


class LoginForm(AuthenticationForm):
    """Django's login form, saying so when a user name is locked out after failed logins."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if username and throttle.locked("password", username):
            minutes = round(settings.LOGIN_LOCKOUT_SECONDS / 60)
            wait = f"{minutes} minutes" if minutes > 1 else "a minute"
            raise ValidationError(
                f"Too many failed logins for this user name: try again in up to {wait}.",
                code="locked",
            )
        return super().clean()
