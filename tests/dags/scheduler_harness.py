"""A real Airflow scheduler for the DAG tests: one set of services per session, a vendor per test.

The services (API server, scheduler with the LocalExecutor, DAG processor, triggerer) run on a metadata DB
of the suite's Postgres, with a DAG folder holding one file that renders every vendor of the session's
vendors folder with the registered steps wrapped for failure injection (:mod:`dag_test_steps`). Runs are
triggered through the REST API as the trigger form does and followed to their end
(:mod:`pipeline.orchestrate.scheduled`). Tests share the catalog and the store, so each works on a vendor of
its own, with a drop of its own (a copy of another vendor's files would be recorded as their duplicates), and
reads back only that vendor's rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from dag_helpers import catalog_rows, vendor_config
from dag_test_steps import FAILURES_FILE, read_calls
from sqlalchemy import create_engine

from pipeline.airflow_local import LocalAirflow
from pipeline.orchestrate.airflow_client import AirflowClient
from pipeline.orchestrate.scheduled import ScheduledRun, follow_run, trigger_run

# Airflow's DAG processor skips files that do not mention both "airflow" and "dag" (its safe mode).
DAG_FILE = '''"""Airflow DAGs of the test suite's vendors, with dag_test_steps' failure injection."""

from sluice_factory import vendor_dags

globals().update(vendor_dags(step_resolver="dag_test_steps:step_class"))
'''
#: The ``application_name`` of the harness's own catalog connections (the tasks' carry none).
HARNESS_APPLICATION = "sluice-test-harness"
#: A two-episode vendor's run takes about a minute on an idle 2-core machine; several run at once, and a
#: machine busy with other work stretches them many times over.
RUN_TIMEOUT_S = 2400.0


@dataclass
class ScheduledVendor:
    """A vendor file of the session's vendors folder, with its own copy of the drop."""

    name: str
    drop: Path
    harness: SchedulerHarness

    def episode_keys(self) -> list[str]:
        return sorted(str(p.relative_to(self.drop)) for p in self.drop.rglob("*.mcap"))

    def fail(self, failures: dict[str, list[str]]) -> None:
        """Make steps fail on these item keys (see dag_test_steps)."""
        (self.drop / FAILURES_FILE).write_text(json.dumps(failures))

    def heal(self) -> None:
        (self.drop / FAILURES_FILE).unlink(missing_ok=True)

    def calls(self) -> list[dict[str, Any]]:
        return [c for c in read_calls(self.harness.store) if c.get("vendor") == self.name]

    def catalog(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """Rows of ``sql``, where ``:vendor`` is this vendor's name."""
        return self.harness.catalog(sql, vendor=self.name, **params)


@dataclass
class SchedulerHarness:
    airflow: LocalAirflow
    root: Path
    vendors_dir: Path
    store: Path
    catalog_url: str
    vendors: dict[str, ScheduledVendor] = field(default_factory=dict)

    @property
    def client(self) -> AirflowClient:
        return self.airflow.client()

    def add_vendor(
        self,
        name: str,
        *,
        steps: dict[str, Any] | None = None,
        cron: str | None = None,
        batches: int = 2,
        episodes: int = 2,
        make_drop: Callable[[Path], object] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> ScheduledVendor:
        """A vendor of the Acme example's shape, on clean two-second episodes with bytes of their own (a seed
        per vendor), or on what ``make_drop`` writes into the drop folder; ``overrides`` replace top-level
        sections of its config (``topics``, ``calibration``...)."""
        from pipeline.synth import RobotDropConfig, make_robot_drop

        drop = self.root / "drops" / name
        if make_drop is None:
            seed = len(self.vendors) + 1
            make_robot_drop(drop, RobotDropConfig(episodes=episodes, seconds=2.0, seed=seed), jobs=2)
        else:
            make_drop(drop)
        config = {**vendor_config(name, drop, steps=steps), **(overrides or {})}
        config["schedule"] = {"cron": cron}
        config["planner"] = {"min_splits": batches, "max_splits": batches, "batch_stagger_s": 0}
        (self.vendors_dir / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        vendor = ScheduledVendor(name, drop, self)
        self.vendors[name] = vendor
        return vendor

    def trigger(self, vendor: ScheduledVendor, conf: dict[str, Any] | None = None) -> str:
        run_id, _ = trigger_run(self.client, vendor.name, conf or {})
        return run_id

    def follow(self, vendor: ScheduledVendor, run_id: str) -> ScheduledRun:
        engine = create_engine(self.catalog_url)
        try:
            return follow_run(self.client, vendor.name, run_id, timeout_s=RUN_TIMEOUT_S, catalog=engine)
        finally:
            engine.dispose()

    def clear_failed(self, vendor: ScheduledVendor, run_id: str) -> None:
        """Clear the run's failed tasks and what follows them, as the UI's Clear button does."""
        self.client.clear_failed(vendor.name, run_id)

    def catalog(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return catalog_rows(self.catalog_url, sql, **params)


def task_states(run: ScheduledRun) -> dict[tuple[str, int], str | None]:
    """(task_id, map_index) -> state of every task instance of a run."""
    return {(ti["task_id"], ti["map_index"]): ti["state"] for ti in run.task_instances}
