"""What a scheduled run is triggered with and how its progress is read (no services: see tests/dags)."""

from __future__ import annotations

from pathlib import Path

import pytest
from orchestrate_helpers import write_vendor

from pipeline.errors import ConfigError
from pipeline.orchestrate.airflow_client import log_error
from pipeline.orchestrate.scheduled import ScheduledRun, _changes, run_conf


def test_the_conf_is_what_the_trigger_form_sends_one_toggle_per_step(tmp_path: Path) -> None:
    vendor = write_vendor(tmp_path, tmp_path)
    defaults = {step.value: config.enabled for step, config in vendor.steps.items()}
    assert run_conf(vendor) == defaults
    only = run_conf(vendor, steps=["ingest", "quality_pre"])
    assert [s for s, on in only.items() if on] == ["ingest", "quality_pre"] and len(only) == 6
    # --conf wins over --steps, key by key.
    assert run_conf(vendor, steps=["ingest"], conf={"annotate": True})["annotate"] is True
    with pytest.raises(ConfigError, match="unknown step 'transcod'"):
        run_conf(vendor, steps=["transcod"])
    with pytest.raises(ConfigError, match="did you mean 'transcode'"):
        run_conf(vendor, conf={"transcod": False})
    with pytest.raises(ConfigError, match="is not a boolean"):
        run_conf(vendor, conf={"transcode": "no"})


def test_every_state_change_is_reported_once_and_retries_count_as_changes() -> None:
    seen: dict[tuple[str, int], tuple[str, int]] = {}
    first = [
        {"task_id": "ingest", "map_index": 0, "state": "queued", "try_number": 1},
        {"task_id": "plan", "map_index": -1, "state": None, "try_number": 0},
    ]
    assert [(c.task, c.state) for c in _changes(first, seen, 1.0)] == [("ingest[0]", "queued")]
    assert _changes(first, seen, 2.0) == []
    again = [{"task_id": "ingest", "map_index": 0, "state": "queued", "try_number": 2}]
    assert [(c.task, c.try_number) for c in _changes(again, seen, 3.0)] == [("ingest[0]", 2)]


def test_the_error_of_a_task_is_the_last_exception_of_its_structured_log() -> None:
    content = [
        {"event": "starting"},
        {"event": "x failed", "error_detail": [{"exc_type": "ValueError", "exc_value": "first"}]},
        {
            "event": "Task failed",
            "error_detail": [{"exc_type": "StepFailedError", "exc_value": "ingest: 1 item"}],
        },
    ]
    assert log_error(content) == "StepFailedError: ingest: 1 item"
    assert log_error([{"event": "fine"}]) is None
    assert log_error("not a list") is None


def test_queue_latency_is_started_minus_queued_per_task_instance() -> None:
    tis = (
        {
            "task_id": "a",
            "map_index": -1,
            "state": "success",
            "queued_when": "2026-01-01T00:00:00Z",
            "start_date": "2026-01-01T00:00:02.5Z",
        },
        {"task_id": "b", "map_index": 0, "state": "skipped", "queued_when": None, "start_date": None},
    )
    run = ScheduledRun("d", "r", "success", 3.0, tis)
    assert run.queue_latency_s() == [2.5]
    assert run.task_states() == {"a": {"success": 1}, "b": {"skipped": 1}}


def test_a_runs_span_is_first_task_start_to_last_task_end() -> None:
    tis = (
        {"task_id": "a", "start_date": "2026-01-01T00:00:01Z", "end_date": "2026-01-01T00:00:04Z"},
        {"task_id": "b", "start_date": "2026-01-01T00:00:03Z", "end_date": "2026-01-01T00:01:00.5Z"},
        {"task_id": "c", "start_date": None, "end_date": None},
    )
    assert ScheduledRun("d", "r", "success", 0.0, tis).span_s() == 59.5
    assert ScheduledRun("d", "r", "queued", 0.0, tis[2:]).span_s() is None
