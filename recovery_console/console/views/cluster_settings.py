"""A cluster's settings: allowlist, policy, custom signatures and detector knobs (operators
edit; everyone else reads)."""

from __future__ import annotations

import json
from dataclasses import asdict

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from detection.core.detectors.hang import HangSettings
from detection.core.detectors.straggler import StragglerSettings
from detection.models import DetectionSettings
from detection.services import detection_settings_of, update_detection_settings
from fleet.core.outbound import redacted
from fleet.models import Cluster
from recovery_console.console import policy_approval
from recovery_console.console.forms import ClusterSettingsForm
from recovery_console.console.models import PolicyChangeRequest
from recovery_console.console.reviews import ApprovalRefused, actor_of
from recovery_console.console.roles import OPERATOR, has_role
from remediation.core.policy import Policy

from .common import cluster_or_404, page, viewer_required


@viewer_required
def cluster_settings(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    # Created with the defaults on first use, so every cluster has settings to show.
    detection = detection_settings_of(cluster)
    editable = has_role(request.user, OPERATOR, cluster)
    initial = ClusterSettingsForm.initial_from(cluster, detection)
    if request.method == "POST":
        if not editable:
            # Disabled fields are no protection against a hand-made POST: refuse it here.
            raise PermissionDenied("changing cluster settings needs the operator role")
        form = ClusterSettingsForm(request.POST, initial=initial)
        if form.is_valid() and _save(request, form, cluster, detection):
            return redirect("cluster-settings", name=cluster.name)
    else:
        form = ClusterSettingsForm(initial=initial)
    if not editable:
        # Viewers get the same form, disabled, so they can read every setting.
        for field in form.fields.values():
            field.disabled = True
    context = {
        "cluster": cluster,
        "form": form,
        "editable": editable,
        "defaults": _defaults(),
        "telemetry": json.dumps(redacted(cluster.telemetry), sort_keys=True),
        "section": "overview",
    }
    return page(request, "console/settings.html", context, status=400 if form.errors else 200)


def _save(
    request: HttpRequest,
    form: ClusterSettingsForm,
    cluster: Cluster,
    detection: DetectionSettings,
) -> bool:
    """Apply both halves in one transaction, so a refused signature leaves the policy as it was."""
    cluster_changes, detection_changes = form.changes(cluster, detection)
    if not cluster_changes and not detection_changes:
        # Nothing to save counts as saved: back to the page, and no audit entry.
        messages.info(request, "Nothing changed.")
        return True
    actor = actor_of(request.user)
    asked = None
    try:
        with transaction.atomic():
            if cluster_changes:
                result = policy_approval.change_cluster_settings(
                    request.user, cluster, cluster_changes
                )
                asked = result if isinstance(result, PolicyChangeRequest) else None
            if detection_changes:
                update_detection_settings(actor, cluster, **detection_changes)
    except ValidationError as exc:
        form.add_service_errors(exc)
        return False
    except ApprovalRefused as exc:
        messages.error(request, f"Not saved: {exc.reason}")
        return False
    saved = [*detection_changes, *([] if asked else cluster_changes)]
    if saved:
        changed = ", ".join(sorted(saved)).replace("_", " ")
        messages.success(request, f"Saved: {changed}.")
    if asked is not None:
        messages.warning(
            request,
            f"Waiting for approval (#{asked.pk}): {'; '.join(asked.why)}. A second person with"
            " the approver role must approve it on the mode page.",
        )
    return True


def _defaults() -> dict[str, object]:
    """The defaults an empty document means, shown beside the fields."""
    documents = {
        "policy": Policy().to_document(),
        "hang": asdict(HangSettings()),
        "straggler": asdict(StragglerSettings()),
    }
    return {name: json.dumps(doc, indent=2, sort_keys=True) for name, doc in documents.items()}
