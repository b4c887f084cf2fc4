"""The console in a real headless Chromium: the review queue from the keyboard, the mode
approval workflow, a live anomaly on an open page and the audit trail's export."""

from __future__ import annotations

import csv
import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from detection.anomalies import record_interruption
from detection.core.interruption import Confidence, Evidence, Interruption
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, NodeRecord, NodeState
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
from fleet.models import Attempt, Cluster, ClusterMode
from recovery_console.console import reviews
from recovery_console.console.models import ModeChangeRequest, Review
from remediation.models import Advice
from tests.factories import AdviceFactory, JobRecordFactory, WorkloadFactory

from .support import PASSWORD, ConsoleBrowserTestCase

pytestmark = pytest.mark.browser


def research_cluster(**policy: object) -> Cluster:
    return services.create_cluster("user:admin", "research", policy=dict(policy))


def advice_on(cluster: Cluster, count: int) -> list[Advice]:
    workload = WorkloadFactory(cluster=cluster, key="llama-70b")
    return [AdviceFactory(anomaly__attempt__workload=workload) for _ in range(count)]


class ReviewQueueTests(ConsoleBrowserTestCase):
    def test_a_reviewer_labels_advice_from_the_queue_with_the_keyboard(self) -> None:
        cluster = research_cluster()
        advice_on(cluster, 3)
        self.person("rita", "reviewer", password=PASSWORD)
        self.log_in_with_the_form("rita", PASSWORD)
        self.open("/reviews/")
        order = [item.get_attribute("data-advice") for item in self.finds(".item")]
        first, second, third = (int(pk) for pk in order)
        self.assertIn("keyboard", self.find("#keys").text.lower())
        self.wait_until(lambda: self.finds(".item.selected"), "the first advice to be selected")

        self.press("f")  # one at a time
        self.assertEqual(sum(item.is_displayed() for item in self.finds(".item")), 1)
        self.press("f")  # back to the list
        self.assertEqual(sum(item.is_displayed() for item in self.finds(".item")), 3)

        self.press("a")  # agree with the first
        self.wait_until(lambda: Review.objects.filter(advice_id=first).exists(), "label 1")
        self.press("d", "3")  # disagree with the second: I would have stopped it
        self.wait_until(lambda: Review.objects.filter(advice_id=second).exists(), "label 2")
        self.wait_until(lambda: self.selected_advice() == str(third), "the third to be selected")
        self.press("c", "the Xid is on another node", "\n", "a")  # comment, then agree
        self.wait_until(lambda: Review.objects.filter(advice_id=third).exists(), "label 3")

        labels = {r.advice_id: r for r in Review.objects.filter(reviewer__username="rita")}
        self.assertEqual(labels[first].agrees, True)
        self.assertEqual((labels[second].agrees, labels[second].preferred_action), (False, "stop"))
        self.assertEqual(labels[third].comment, "the Xid is on another node")
        self.wait_until(lambda: self.finds("#queue-empty"), "the queue to be empty")
        self.assertEqual(self.find("[data-waiting]").text, "0")

    def test_a_comment_being_typed_survives_a_live_refresh_of_the_queue(self) -> None:
        cluster = research_cluster()
        advice_on(cluster, 2)
        self.person("rita", "reviewer", password=PASSWORD)
        olga = self.person("olga", "reviewer")
        self.log_in_with_the_form("rita", PASSWORD)
        self.open("/reviews/")
        self.wait_for_live_updates()
        mine, theirs = (
            Advice.objects.get(pk=item.get_attribute("data-advice")) for item in self.finds(".item")
        )
        self.wait_until(lambda: self.selected_advice() == str(mine.pk), "the first advice selected")

        self.press("c", "checked the node's syslog")
        refreshed = int(self.find("#queue-live").get_attribute("data-refreshed") or 0)
        reviews.label_advice(olga, theirs, agrees=True)  # the queue changes while rita types
        self.press("\n")  # leave the box: the refresh held back while typing runs now
        self.wait_until(
            lambda: int(self.find("#queue-live").get_attribute("data-refreshed") or 0) > refreshed,
            "the queue to be refreshed",
        )
        self.wait_until(lambda: self.selected_advice() == str(mine.pk), "the advice kept selected")
        self.press("a")
        self.wait_until(lambda: Review.objects.filter(advice=mine).exists(), "rita's label")
        self.assertEqual(Review.objects.get(advice=mine).comment, "checked the node's syslog")


class ModeApprovalTests(ConsoleBrowserTestCase):
    def test_an_operator_requests_action_mode_and_a_second_person_approves_it(self) -> None:
        cluster = research_cluster(approval_min_labelled=2)
        alice = self.person("alice", "operator", "reviewer")
        for advice in advice_on(cluster, 2):
            reviews.label_advice(alice, advice, agrees=True)
        self.log_in_as(alice)
        self.open("/clusters/research/mode/")
        self.assertIn("agreed with 2 of 2", self.text())
        self.find("#request-form textarea").send_keys("canary partition first")
        self.find("#request").click()
        self.wait_until(lambda: "must approve it" in self.text(), "the request to be made")
        self.assertEqual(ModeChangeRequest.objects.get().note, "canary partition first")

        self.log_in_as(self.person("bob", "approver"))
        self.open("/clusters/research/mode/")
        self.assertIn("canary partition first", self.find("#pending-request").text)
        self.find("#approve").click()
        self.wait_until(lambda: "is now in action mode" in self.text(), "the approval")
        self.assertEqual(self.find("#mode-badge").text, "action mode")
        cluster.refresh_from_db()
        self.assertEqual(cluster.mode, ClusterMode.ACTION)

        self.log_in_as(alice)
        self.open("/clusters/research/mode/")
        self.find("#monitor-form input[name=reason]").send_keys("restarts look wrong")
        self.find("#to-monitor").click()
        self.wait_until(lambda: "back in monitor mode" in self.text(), "monitor mode")
        cluster.refresh_from_db()
        self.assertEqual(cluster.mode, ClusterMode.MONITOR)

    def test_approval_is_refused_below_the_threshold_and_for_your_own_request(self) -> None:
        cluster = research_cluster(approval_min_labelled=3)
        dana = self.person("dana", "operator", "approver", "reviewer")
        (advice,) = advice_on(cluster, 1)
        reviews.label_advice(dana, advice, agrees=True)
        self.log_in_as(dana)
        self.open("/clusters/research/mode/")
        self.assertIn("only 1 advices were labelled", self.text())
        self.find("#request").click()
        self.wait_until(lambda: self.finds("#approve"), "the approve button")
        self.assertIn("You asked for this", self.find("#pending-request").text)
        self.find("#approve").click()
        self.wait_until(lambda: "Not approved" in self.text(), "the refusal")
        self.assertIn("you asked for this change yourself", self.find(".messages").text)

        self.log_in_as(self.person("bob", "approver"))
        self.open("/clusters/research/mode/")
        self.find("#approve").click()
        self.wait_until(lambda: "Not approved" in self.text(), "the refusal")
        refusal = self.find(".messages").text
        self.assertIn("below the policy's threshold", refusal)
        self.assertIn("only 1 advices were labelled", refusal)
        cluster.refresh_from_db()
        self.assertEqual(cluster.mode, ClusterMode.MONITOR)


class LiveUpdateTests(ConsoleBrowserTestCase):
    def test_a_new_anomaly_appears_on_the_open_workload_page_without_a_reload(self) -> None:
        cluster = research_cluster()
        now = timezone.now()
        nodes = tuple(NodeRecord(f"n{i}", NodeState.ALLOCATED, gpus=8) for i in (1, 2))
        job = JobRecordFactory(job_id="700", nodes=("n1", "n2"), start_time=now)
        services.record_snapshot("test", cluster, ClusterSnapshot(now, (job,), nodes))
        attempt = Attempt.objects.get(cluster=cluster, job_id="700")
        self.log_in_as(self.person("carol", "viewer"))
        self.open(f"/workloads/{attempt.workload_id}/")
        self.assertIn("No anomaly detected", self.find("#attempts-live").text)
        self.wait_for_live_updates()
        self.driver.execute_script("window.notReloaded = true")

        with transaction.atomic():
            anomaly, _ = record_interruption(
                attempt,
                Interruption(
                    kind=Kind.CRASH,
                    category=Category.GPU_HARDWARE,
                    attribution=Attribution.HARDWARE,
                    confidence=Confidence(0.95, ConfidenceLabel.ESTABLISHED),
                    hosts=("n2",),
                    root_cause="nvrm_xid:n2",
                    summary="Xid 79 on n2: GPU has fallen off the bus",
                    explanation="Xid 79 on n2",
                    evidence=(Evidence(text="NVRM: Xid (PCI:0000:3b:00): 79", host="n2"),),
                    first_evidence_at=now,
                ),
                now + timedelta(seconds=3),
            )

        row = self.wait_until(
            lambda: self.finds(f'#attempts-live tr[data-anomaly="{anomaly.pk}"]'),
            "the anomaly's row",
        )[0]
        self.assertIn("GPU has fallen off the bus", row.text)
        self.assertTrue(self.driver.execute_script("return window.notReloaded === true"))
        self.wait_until(
            lambda: int(self.find("#timeline-live").get_attribute("data-refreshed") or 0),
            "the timeline to be redrawn",
        )


class AuditExportTests(ConsoleBrowserTestCase):
    def test_the_filtered_audit_trail_is_exported_as_csv_and_json(self) -> None:
        research_cluster()
        services.create_cluster("user:admin", "other")
        self.log_in_as(self.person("carol", "viewer"))
        self.open("/audit/")
        self.wait_until(lambda: "Hash chain intact" in self.find("#chain-status").text, "chain")
        self.find("input[name=actor]").send_keys("user:admin")
        self.find("select[name=cluster] option[value=research]").click()
        self.find("form.filters button[type=submit]").click()
        self.wait_until(lambda: "cluster=research" in self.driver.current_url, "the filter")

        self.find("#export-csv").click()
        path = self.downloads / "audit-trail.csv"
        self.wait_until(path.exists, "the CSV download")
        rows = list(csv.DictReader(path.read_text().splitlines()))
        self.assertEqual(
            [(r["actor"], r["verb"]) for r in rows], [("user:admin", "cluster.created")]
        )

        self.open(
            self.find("#export-json").get_attribute("href").removeprefix(self.live_server_url)
        )
        body = json.loads(self.find("body").text)
        self.assertEqual([e["verb"] for e in body["results"]], ["cluster.created"])
        self.assertEqual(body["results"][0]["cluster"], "research")


class RuleProposalTests(ConsoleBrowserTestCase):
    def test_reviewers_corrections_propose_a_rule_an_operator_asks_for_and_an_approver_applies(
        self,
    ) -> None:
        cluster = research_cluster()
        ray = self.person("ray", "reviewer")
        sam = self.person("sam", "reviewer")
        for advice in advice_on(cluster, 3):
            for reviewer in (ray, sam):
                reviews.label_advice(reviewer, advice, agrees=False, preferred_action="restart")
        key = advice.anomaly.signature or advice.category

        alice = self.person("alice", "operator")
        self.log_in_as(alice)
        self.open("/clusters/research/settings/")
        proposal = self.find(f'#rule-proposals .proposal[data-key="{key}"]')
        self.assertIn("6 of 6 reviewers chose restart", proposal.text)
        self.assertIn("100% with this rule", proposal.text)
        proposal.find_element("css selector", "button").click()
        self.wait_until(lambda: "Waiting for approval" in self.text(), "the rule edit to be asked")

        self.log_in_as(self.person("bob", "approver"))
        self.open("/clusters/research/mode/")
        pending = self.find("#pending-policy-request").text
        self.assertIn("rule edit proposed from reviewers' corrections", pending)
        self.find("#approve-policy").click()
        self.wait_until(lambda: not self.finds("#pending-policy-request"), "the approval")
        cluster.refresh_from_db()
        self.assertEqual(cluster.policy["rules"][key], "restart")
        self.open("/clusters/research/settings/")
        self.assertFalse(self.finds(f'#rule-proposals .proposal[data-key="{key}"]'))
