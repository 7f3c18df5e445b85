"""Helpers of the DAG tests: the synthetic vendor handle, its config, and reading a run's states."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
REPO_DAGS = REPO / "dags"


@dataclass(frozen=True)
class AirflowHome:
    home: Path
    dags_folder: Path


@dataclass
class SyntheticVendor:
    """A vendor file, its drop, its catalog and store, with the SLUICE_* environment pointing at them."""

    name: str
    vendors_dir: Path
    drop: Path
    store: Path
    database_url: str
    airflow: AirflowHome

    @property
    def dag_id(self) -> str:
        return self.name

    def episode_keys(self) -> list[str]:
        return sorted(str(p.relative_to(self.drop)) for p in self.drop.rglob("*.mcap"))

    def fail(self, step: str, keys: list[str]) -> None:
        """Make ``step`` raise on these item keys (see dag_test_steps)."""
        (self.drop / "_failures.json").write_text(json.dumps({step: keys}))

    def heal(self) -> None:
        (self.drop / "_failures.json").unlink(missing_ok=True)

    def dag(self) -> Any:
        from airflow.dag_processing.dagbag import BundleDagBag

        folder = str(self.airflow.dags_folder)
        bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
        assert bag.import_errors == {}
        return bag.dags[self.dag_id]

    def run(self, conf: dict[str, Any] | None = None, *, logical_date: datetime | None = None) -> Any:
        """One ``dag.test()`` run; returns the DagRun (its task instances hold the states).

        The same ``logical_date`` gives the same Airflow run id: ``dag.test()`` then clears that run and runs
        it again, as clearing it in the UI would.
        """
        when = logical_date or datetime.now(UTC)
        return self.dag().test(run_conf=conf, logical_date=when, run_after=when)


def vendor_config(name: str, drop: Path, *, steps: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Acme example vendor, renamed and pointed at ``drop``, planned into two unstaggered batches."""
    config = yaml.safe_load((REPO_DAGS / "vendors" / "acme_robotics.yaml").read_text())
    config["name"] = name
    config["source"] = {**config["source"], "url": str(drop), "settle_s": 0}
    config["schedule"] = {"cron": None}
    config["planner"] = {"min_splits": 2, "max_splits": 2, "batch_stagger_s": 0}
    # No retries: a forced failure should fail at once instead of waiting out the retry delay.
    every_step = {"retries": 0, "enabled": True}
    config["steps"] = {
        step: {**every_step, **(steps or {}).get(step, {})}
        for step in ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
    }
    return config


def task_states(dag_run: Any) -> dict[tuple[str, int], str | None]:
    """(task_id, map_index) → state of every task instance of a ``dag.test()`` run."""
    return {(ti.task_id, ti.map_index): ti.state for ti in dag_run.get_task_instances()}


def catalog_rows(database_url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` on the catalog at ``database_url`` (a short-lived engine: tests read after runs)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql), params)]
    finally:
        engine.dispose()
