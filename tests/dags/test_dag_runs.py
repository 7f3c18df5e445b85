"""Unit-level DAG runs with ``dag.test()``: what a run decides before any step works.

``dag.test()`` runs tasks in this process and ignores pools; every test of what the steps do under a run
goes through a real scheduler instead (test_scheduled_runs.py).
"""

from __future__ import annotations

import pytest
from dag_helpers import SyntheticVendor, task_states
from dag_test_steps import read_calls
from sqlalchemy import create_engine, text

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow]


def _catalog(vendor: SyntheticVendor, sql: str, **params: object) -> list[tuple]:
    engine = create_engine(vendor.database_url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


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
