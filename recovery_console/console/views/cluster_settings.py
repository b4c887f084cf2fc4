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
from django.views.decorators.http import require_POST

from detection.core.detectors.hang import HangSettings
from detection.core.detectors.straggler import StragglerSettings
from detection.models import DetectionSettings
from detection.services import detection_settings_of, update_detection_settings
from fleet.core.outbound import redacted
from fleet.models import Cluster
from recovery_console.console import policy_approval, rule_proposals
from recovery_console.console.forms import ClusterSettingsForm
from recovery_console.console.models import PolicyChangeRequest
from recovery_console.console.reviews import ApprovalRefused, actor_of
from recovery_console.console.roles import OPERATOR, has_role
from remediation.core.policy import Policy
from remediation.core.proposals import MIN_ADVICE, MIN_SHARE, RuleProposal

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
        "proposals": [_shown(p) for p in rule_proposals.rule_proposals(cluster)],
        "proposal_min_advice": MIN_ADVICE,
        "proposal_min_share": f"{MIN_SHARE:.0%}",
        "defaults": _defaults(),
        "telemetry": json.dumps(redacted(cluster.telemetry), sort_keys=True),
        "section": "overview",
    }
    return page(request, "console/settings.html", context, status=400 if form.errors else 200)


@viewer_required
@require_POST
def ask_rule_edit(request: HttpRequest, name: str) -> HttpResponse:
    """Ask for a rule the reviewers' corrections propose (operator); it waits for approval."""
    cluster = cluster_or_404(name)
    try:
        asked = rule_proposals.ask_for_rule_edit(request.user, cluster, request.POST.get("key", ""))
    except ValidationError as exc:
        messages.error(request, f"Not asked: {'; '.join(exc.messages)}")
    except ApprovalRefused as exc:
        messages.error(request, f"Not asked: {exc.reason}")
    else:
        messages.warning(
            request,
            f"Waiting for approval (#{asked.pk}): a second person with the approver role must "
            "approve the rule edit on the mode page.",
        )
    return redirect("cluster-settings", name=cluster.name)


def _shown(proposal: RuleProposal) -> dict[str, object]:
    return {
        **asdict(proposal),
        "agreement_now_text": _percent(proposal.agreement_now),
        "agreement_with_rule_text": _percent(proposal.agreement_with_rule),
    }


def _percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


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
