"""The Advisor API client a controller uses from inside the cluster: plain HTTP and JSON
(stdlib), a bearer token scoped to one cluster, timeouts, and errors that say what failed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from fleet.core.scheduler import ClusterSnapshot, snapshot_to_json

from .reconciler import AdviceItem, AdviceWithdrawn, AdvisorUnavailable, NodeResume

PAGE_SIZE = 250  # the Advisor API's largest page: fewest round trips
MAX_PAGES = 1000  # a cursor that never ends must not keep the cycle forever


class HttpAdvisor:
    """``cluster`` may be left out: the token names it (``GET /api/v1/advisor/self``), asked on
    first use. ``heartbeat_extra`` goes with every heartbeat (the sender's role, interval)."""

    def __init__(
        self,
        base_url: str,
        cluster: str | None,
        token: str,
        timeout: float = 10.0,
        heartbeat_extra: dict[str, Any] | None = None,
    ) -> None:
        self.root = f"{base_url.rstrip('/')}/api/v1/advisor"
        self.cluster = cluster
        self.token, self.timeout = token, timeout
        self.heartbeat_extra = dict(heartbeat_extra or {})

    @property
    def base(self) -> str:
        if self.cluster is None:
            self.cluster = str(self.whoami()["cluster"])
        # Quoted: a cluster name must not be able to change the path it is sent to.
        return f"{self.root}/{quote(self.cluster)}"

    def whoami(self) -> dict[str, Any]:
        """The token's cluster and name, and the settings its holder needs (hold timeout)."""
        answer = self._request("GET", f"{self.root}/self")
        if not isinstance(answer, dict) or not answer.get("cluster"):
            raise AdvisorUnavailable(f"GET {self.root}/self: no cluster in {answer!r}"[:500])
        if self.cluster is not None and answer["cluster"] != self.cluster:
            # A token of another cluster would be refused on every call: say so at once.
            raise AdvisorUnavailable(
                f"the token belongs to cluster {answer['cluster']!r}, not {self.cluster!r}"
            )
        return answer

    def post_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self._call("POST", "/snapshots", snapshot_to_json(snapshot))

    def active_advice(self) -> list[AdviceItem]:
        """Every page of the active advice, following the cursor."""
        items: list[AdviceItem] = []
        path: str | None = f"/advice?active=true&limit={PAGE_SIZE}"
        for _ in range(MAX_PAGES):
            if path is None:
                return items
            page = self._call("GET", path)
            if isinstance(page, list):  # a console from before paging: one unpaged list
                return [*items, *(AdviceItem.from_json(item) for item in page)]
            items.extend(AdviceItem.from_json(item) for item in page["results"])
            path = _next_path(page.get("next"))
        raise AdvisorUnavailable(f"{self.base}/advice: more than {MAX_PAGES} pages")

    def reconcile(self, advice: AdviceItem, disposition: str, reason: str = "") -> bool:
        body = {
            "observed_generation": advice.generation,
            "disposition": disposition,
            "reason": reason,
        }
        try:
            self._call("PUT", f"/advice/{advice.id}/reconciliation", body)
        except _Conflict as exc:
            if exc.withdrawn:
                raise AdviceWithdrawn(exc.detail) from exc
            return False  # a stale generation, or another controller's claim
        return True

    def milestone(
        self, advice: AdviceItem, step: str, at: datetime, detail: dict[str, Any], key: str
    ) -> None:
        body = {
            "advice": advice.id,
            "idempotency_key": key,
            "action": step,
            "at": at.isoformat(),
            "detail": detail,
        }
        try:
            self._call("POST", "/milestones", body)
        except _Conflict as exc:
            # Recorded, but the advice was withdrawn: no further step (only this answer is 409).
            raise AdviceWithdrawn(exc.detail) from exc

    def heartbeat(self, info: dict[str, Any]) -> dict[str, Any]:
        """Alive; the answer says how fresh the console's other snapshots are, and the hold
        timeout (an older console answers nothing: an empty dict)."""
        answer = self._call("POST", "/heartbeat", {**info, **self.heartbeat_extra})
        return answer if isinstance(answer, dict) else {}

    def node_resumes(self) -> list[NodeResume]:
        return [NodeResume.from_json(item) for item in self._call("GET", "/node-resumes") or []]

    def report_resume(self, item: NodeResume, outcome: str, detail: str) -> None:
        body = {"node": item.node, "requested_at": item.requested_at, "outcome": outcome}
        self._call("POST", "/node-resumes", body | {"detail": detail})

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return self._request(method, self.base + path, body)

    def _request(self, method: str, url: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is the operator's console
            url,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            # A conflict is an answer, not an outage: reconcile turns it into False, not a retry.
            # Bounded: an HTML error page must not flood the controller's log.
            detail = exc.read()[:2000].decode(errors="replace")
            if exc.code == 409:
                raise _Conflict(detail) from exc
            raise AdvisorUnavailable(f"{method} {url}: HTTP {exc.code} {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise AdvisorUnavailable(f"{method} {url}: {exc}") from exc
        try:
            return json.loads(raw) if raw else None
        except ValueError as exc:
            # A proxy's HTML page answered instead of the console: an outage, not a crash.
            raise AdvisorUnavailable(f"{method} {url}: not JSON: {raw[:200]!r}") from exc


def _next_path(link: str | None) -> str | None:
    """The path of the next page from its link, kept under our own base: behind a proxy the
    link's host or scheme may not be the one the controller was told to use."""
    if not link:
        return None
    return f"/advice?{urlsplit(link).query}"


class _Conflict(Exception):
    """A 409: an answer, not an outage. ``withdrawn``: the advice is no longer enforced."""

    def __init__(self, body: str) -> None:
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        answer = answer if isinstance(answer, dict) else {}
        self.detail = str(answer.get("detail", body))[:500]
        self.withdrawn = answer.get("code") == "withdrawn"
        super().__init__(self.detail)
