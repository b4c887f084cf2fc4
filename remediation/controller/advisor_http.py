"""The Advisor API client a controller uses from inside the cluster: plain HTTP and JSON
(stdlib), a bearer token scoped to one cluster, timeouts, and errors that say what failed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any
from urllib.parse import quote

from recovery_console.fleet.core.scheduler import ClusterSnapshot, snapshot_to_json

from .reconciler import AdviceItem, AdvisorUnavailable


class HttpAdvisor:
    def __init__(self, base_url: str, cluster: str, token: str, timeout: float = 10.0) -> None:
        # Quoted: a cluster name must not be able to change the path it is sent to.
        self.base = f"{base_url.rstrip('/')}/api/v1/advisor/{quote(cluster)}"
        self.token, self.timeout = token, timeout

    def post_snapshot(self, snapshot: ClusterSnapshot) -> None:
        self._call("POST", "/snapshots", snapshot_to_json(snapshot))

    def active_advice(self) -> list[AdviceItem]:
        return [AdviceItem.from_json(item) for item in self._call("GET", "/advice?active=true")]

    def reconcile(self, advice: AdviceItem, disposition: str, reason: str = "") -> bool:
        body = {
            "observed_generation": advice.generation,
            "disposition": disposition,
            "reason": reason,
        }
        try:
            self._call("PUT", f"/advice/{advice.id}/reconciliation", body)
        except _Conflict:
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
        self._call("POST", "/milestones", body)

    def heartbeat(self, info: dict[str, Any]) -> None:
        self._call("POST", "/heartbeat", info)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is the operator's console
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            # A conflict is an answer, not an outage: reconcile turns it into False, not a retry.
            if exc.code == 409:
                raise _Conflict(path) from exc
            # Bounded: an HTML error page must not flood the controller's log.
            detail = exc.read()[:500].decode(errors="replace")
            raise AdvisorUnavailable(
                f"{method} {self.base}{path}: HTTP {exc.code} {detail}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise AdvisorUnavailable(f"{method} {self.base}{path}: {exc}") from exc
        return json.loads(raw) if raw else None


class _Conflict(Exception):
    pass
