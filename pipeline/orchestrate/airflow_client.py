"""Talking to a running Airflow without importing it: its REST API as a user, its metadata DB read-only.

Used by the tests and benchmarks that run a real scheduler (:mod:`pipeline.airflow_local` starts one) and by
anything that triggers vendor runs from outside Airflow. The metadata DB is read with plain SQL on
Airflow's ``task_instance`` and ``import_error`` tables, the figures the scheduler itself wrote.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline.errors import InfrastructureError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class AirflowApiError(InfrastructureError):
    """Airflow's REST API refused a request (``status`` is its HTTP status) or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class TaskInstanceTimes:
    """One task instance as the metadata DB recorded it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str | None
    pool: str
    pool_slots: int
    start_s: float | None  # epoch seconds
    end_s: float | None


def peak_pool_slots(task_instances: Iterable[TaskInstanceTimes]) -> dict[str, int]:
    """The most slots each pool had in use at any instant, from the tasks' running intervals.

    Intervals are half-open ``[start, end)``: a task that ends at the instant another starts does not
    overlap it. (Airflow counts a slot as taken from ``queued`` on, a little before ``start``; the figure
    is therefore never above what the scheduler counted.)
    """
    events: list[tuple[float, int, str, int]] = []
    for ti in task_instances:
        if ti.start_s is None or ti.end_s is None:
            continue
        events.append((ti.start_s, 1, ti.pool, ti.pool_slots))
        events.append((ti.end_s, 0, ti.pool, -ti.pool_slots))  # 0 sorts ends before starts at a tie
    in_use: dict[str, int] = {}
    peak: dict[str, int] = {}
    for _, _, pool, delta in sorted(events):
        in_use[pool] = in_use.get(pool, 0) + delta
        peak[pool] = max(peak.get(pool, 0), in_use[pool])
    return peak


class AirflowClient:
    """One Airflow: its API at ``url`` (logged in as ``user``) and its metadata DB at ``metadata_url``."""

    def __init__(self, url: str, *, user: str, password: str, metadata_url: str) -> None:
        self.url = url.rstrip("/")
        self.user = user
        self._password = password
        self._cached_token: str | None = None
        self.metadata_url = metadata_url

    # -- the REST API -------------------------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """Call the REST API as the admin user; returns the decoded JSON (None for an empty answer).

        The login token is kept and renewed when the server refuses it. A request that times out or
        finds the server unreachable is tried again a few times (a busy two-core machine makes the API
        server slow to answer, not gone), except a POST, which may have been carried out.
        """
        for attempt in range(2):
            token = self._token(renew=attempt > 0)
            try:
                return _request(method, f"{self.url}{path}", body, {"Authorization": f"Bearer {token}"})
            except AirflowApiError as exc:
                if exc.status != 401 or attempt:
                    raise
        raise AssertionError("unreachable")

    def _token(self, *, renew: bool = False) -> str:
        if self._cached_token is None or renew:
            answer = _request(
                "POST",
                f"{self.url}/auth/token",
                {"username": self.user, "password": self._password},
                {},
                retry=True,  # logging in twice is harmless
            )
            self._cached_token = str(answer["access_token"])
        return self._cached_token

    def unpause(self, dag_id: str) -> None:
        self.set_paused(dag_id, False)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})

    def dag(self, dag_id: str) -> dict[str, Any]:
        """The DAG as the API describes it (``is_paused``, ``next_dagrun_run_after``, ...)."""
        found: dict[str, Any] = self.api("GET", f"/api/v2/dags/{dag_id}")
        return found

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
        return found

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of the DAG (newest first)."""
        found = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=1000&order_by=-run_after")
        return list(found["dag_runs"])

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The run's task instances (mapped ones one per map index) as the API lists them."""
        found = self.api(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000&order_by=map_index"
        )
        return list(found["task_instances"])

    def task_error(
        self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int
    ) -> str | None:
        """The exception a task attempt ended with (``Type: message``), read from its log; None if none."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        try:
            found = self.api("GET", f"{path}?map_index={map_index}&full_content=true")
        except AirflowApiError:
            return None
        return log_error(found.get("content") if isinstance(found, dict) else None)

    def xcom(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
        """What a task instance returned (its ``return_value`` XCom), or None when it returned nothing."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        try:
            found = self.api("GET", f"{path}?map_index={map_index}&deserialize=true")
        except AirflowApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found.get("value") if isinstance(found, dict) else None

    def clear_failed(self, dag_id: str, run_id: str) -> None:
        """Clear the run's failed tasks and everything downstream of them, as the UI's Clear does; the
        run goes back to queued and the scheduler runs them again."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "only_failed": True,
            "include_downstream": True,
            "reset_dag_runs": True,
        }
        self.api("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)

    def set_pools(self, pools: Mapping[str, tuple[int, str]]) -> None:
        """Create or resize these pools (name -> (slots, description)); other pools are left alone."""
        known = {p["name"] for p in self.api("GET", "/api/v2/pools?limit=1000")["pools"]}
        for name, (slots, description) in pools.items():
            body = {"name": name, "slots": slots, "description": description, "include_deferred": False}
            if name in known:
                self.api("PATCH", f"/api/v2/pools/{name}", body)
            else:
                self.api("POST", "/api/v2/pools", body)

    def api_import_errors(self) -> dict[str, str]:
        """File -> stack trace of the DAG files that failed to import, as the API reports them."""
        found = self.api("GET", "/api/v2/importErrors?limit=1000")["import_errors"]
        return {str(e["filename"]): str(e["stack_trace"]) for e in found}

    def trigger(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, *, run_id: str | None = None
    ) -> str:
        """Start a run now; returns its run id."""
        body: dict[str, Any] = {"logical_date": None, "conf": dict(conf or {})}
        if run_id:
            body["dag_run_id"] = run_id
        return str(self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"])

    def wait_for_dags(self, dag_ids: Iterable[str], *, timeout_s: float = 120.0) -> None:
        """Wait until the DAG processor has registered these DAGs (they can then be triggered)."""
        wanted = set(dag_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = {d["dag_id"] for d in self.api("GET", "/api/v2/dags?limit=1000")["dags"]}
            if wanted <= found:
                return
            time.sleep(1.0)
        raise AirflowApiError(f"DAGs {sorted(wanted - found)} did not appear within {timeout_s:g} s")

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout_s: float = 600.0) -> str:
        """Wait until the run is finished; returns its state (``success`` or ``failed``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = str(self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
            if state in ("success", "failed"):
                return state
            time.sleep(1.0)
        raise AirflowApiError(f"run {dag_id}/{run_id} did not finish within {timeout_s:g} s")

    # -- the metadata DB (read only) ----------------------------------------------------------------------

    def metadata_engine(self) -> Engine:
        from sqlalchemy import create_engine

        return create_engine(self.metadata_url)

    def task_instances(self, dag_id: str, run_id: str | None = None) -> list[TaskInstanceTimes]:
        """Every task instance of a DAG (or of one run) with its pool and start and end times."""
        from sqlalchemy import text

        query = (
            "SELECT dag_id, run_id, task_id, map_index, state, pool, pool_slots, start_date, end_date "
            "FROM task_instance WHERE dag_id = :dag_id" + (" AND run_id = :run_id" if run_id else "")
        )
        engine = self.metadata_engine()
        try:
            with engine.connect() as conn:
                rows = conn.execute(text(query), {"dag_id": dag_id, "run_id": run_id}).all()
        finally:
            engine.dispose()
        return [
            TaskInstanceTimes(
                r.dag_id,
                r.run_id,
                r.task_id,
                r.map_index,
                r.state,
                r.pool,
                r.pool_slots,
                _epoch(r.start_date),
                _epoch(r.end_date),
            )
            for r in rows
        ]

    def import_errors(self) -> dict[str, str]:
        """File → stack trace of the DAG files that failed to import."""
        from sqlalchemy import text

        engine = self.metadata_engine()
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT filename, stacktrace FROM import_error")).all()
        finally:
            engine.dispose()
        return {str(r.filename): str(r.stacktrace) for r in rows}


def log_error(content: Any) -> str | None:
    """The last exception in a structured task log (Airflow 3's JSON log events), as ``Type: message``."""
    if not isinstance(content, list):
        return None
    found = None
    for event in content:
        if not isinstance(event, dict):
            continue
        for detail in event.get("error_detail") or ():
            if isinstance(detail, dict) and detail.get("exc_type"):
                found = f"{detail['exc_type']}: {detail.get('exc_value', '')}".strip()
    return found


def _epoch(value: datetime | str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):  # SQLite hands back text
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


#: Attempts of a request that timed out or found no server, and the pause between them.
REQUEST_ATTEMPTS = 4
REQUEST_RETRY_PAUSE_S = 2.0
REQUEST_TIMEOUT_S = 60.0


def _request(
    method: str, url: str, body: Any, headers: Mapping[str, str], *, retry: bool | None = None
) -> Any:
    """One API call; ``retry`` (default: for every method but POST) tries a timeout, a refused connection
    or a server error again."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **headers}
    )
    attempts = REQUEST_ATTEMPTS if (method != "POST" if retry is None else retry) else 1
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                raw = response.read()
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            # A server error on a busy machine (the API server's database session timed out, say) is
            # worth another try for a request that changes nothing.
            if exc.code < 500 or attempt + 1 == attempts:
                raise AirflowApiError(f"{method} {url} answered {exc.code}: {detail}", exc.code) from None
            log.warning("%s %s answered %d; trying again", method, url, exc.code)
            time.sleep(REQUEST_RETRY_PAUSE_S)
        except OSError as exc:
            if attempt + 1 == attempts:
                raise AirflowApiError(f"{method} {url} failed: {exc}") from None
            time.sleep(REQUEST_RETRY_PAUSE_S)
    return json.loads(raw) if raw else None
