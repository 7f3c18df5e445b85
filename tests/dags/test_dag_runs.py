"""Unit-level DAG runs with ``dag.test()``: what a run decides before any step works, and who it connects as.

``dag.test()`` runs tasks in this process and ignores pools; every test of what the steps do under a run
goes through a real scheduler instead (test_scheduled_runs.py). The role test stays here: it needs the
tasks to see this process's environment (the ingest role's URL), which a running scheduler's do not.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from dag_helpers import SyntheticVendor, catalog_rows, task_states
from dag_test_steps import read_calls
from sqlalchemy import make_url

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow]

STEPS = ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")


def _catalog(vendor: SyntheticVendor, sql: str, **params: object) -> list[tuple]:
    return catalog_rows(vendor.database_url, sql, **params)


def test_an_unknown_conf_key_fails_the_run_before_anything_is_opened(
    synthetic_vendor: SyntheticVendor,
) -> None:
    dag_run = synthetic_vendor.run({"transcod": False})
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states[("validate_conf", -1)] == "failed"
    assert states[("discover", -1)] == "upstream_failed"
    assert states[("finalize", -1)] == "failed"
    assert _catalog(synthetic_vendor, "SELECT id FROM pipeline_runs") == []
    assert read_calls(synthetic_vendor.store) == []


def test_every_catalog_connection_of_a_dag_run_is_the_ingest_role(
    synthetic_vendor: SyntheticVendor,
    ingest_role_url: str,
    connection_log: Callable[[str], Callable[[], list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every task of a run (discover, plan, the six steps, warehouse sync, finalize) builds its clients from
    the environment: with the ingest role's URL there, no task connects to the catalog as anyone else."""
    monkeypatch.setenv("SLUICE_INGEST_DATABASE_URL", ingest_role_url)
    users = connection_log(make_url(synthetic_vendor.database_url).database or "")
    dag_run = synthetic_vendor.run()
    assert dag_run.state == "success"
    seen = users()
    assert seen and set(seen) == {"sluice_ingest"}, seen
    steps = _catalog(synthetic_vendor, "SELECT DISTINCT step FROM step_runs WHERE status = 'succeeded'")
    assert {s for (s,) in steps} == set(STEPS)
