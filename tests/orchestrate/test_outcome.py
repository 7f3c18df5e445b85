"""The run's outcome from its tasks' states: criticality comes from the vendor config."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import load_vendor
from pipeline.enums import RunOutcome, StepName
from pipeline.orchestrate import TaskState, decide_outcome

REPO = Path(__file__).resolve().parents[2]
ACME = load_vendor(REPO / "dags" / "vendors" / "acme_robotics.yaml", base_dir=REPO)
STEPS = [step.value for step in StepName]


def _states(overrides: dict[tuple[str, int], str] | None = None, batches: int = 2) -> list[TaskState]:
    states = {(task, -1): "success" for task in ("validate_conf", "discover", "plan", "warehouse_sync")}
    states |= {(step, i): "success" for step in STEPS for i in range(batches)}
    states |= overrides or {}
    return [TaskState(task, index, state) for (task, index), state in states.items()]


def test_all_done_is_a_success() -> None:
    decision = decide_outcome(ACME, _states())
    assert (decision.outcome, decision.failures, decision.warnings) == (RunOutcome.SUCCEEDED, [], [])


def test_switched_off_steps_are_not_failures() -> None:
    skipped = {("transcode", 0): "skipped", ("transcode", 1): "skipped"}
    assert decide_outcome(ACME, _states(skipped)).outcome is RunOutcome.SUCCEEDED


def test_a_non_critical_failure_is_a_warning_naming_its_batches() -> None:
    decision = decide_outcome(ACME, _states({("annotate", 1): "failed"}), batch_ids=[41, 42])
    assert decision.outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS
    assert decision.failures == []
    assert decision.warnings == [
        {"step": "annotate", "critical": False, "batches": [42], "detail": "failed in 1 of 2 batch(es)"}
    ]


def test_a_critical_failure_fails_the_run_and_is_counted_once() -> None:
    states = {
        ("transcode", 0): "failed",
        ("quality_post", 0): "upstream_failed",
        ("annotate", 0): "upstream_failed",
    }
    decision = decide_outcome(ACME, _states(states))
    assert decision.outcome is RunOutcome.FAILED
    assert [f["step"] for f in decision.failures] == ["transcode"]
    assert decision.warnings == []


def test_criticality_is_read_from_the_config() -> None:
    steps = ACME.steps.model_copy(
        update={"transcode": ACME.steps["transcode"].model_copy(update={"critical": False})}
    )
    relaxed = ACME.model_copy(update={"steps": steps})
    decision = decide_outcome(relaxed, _states({("transcode", 0): "failed"}))
    assert decision.outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS


def test_a_run_level_failure_fails_the_run() -> None:
    states = {
        ("validate_conf", -1): "failed",
        ("discover", -1): "upstream_failed",
        ("plan", -1): "upstream_failed",
    }
    decision = decide_outcome(ACME, _states(states, batches=0))
    assert decision.outcome is RunOutcome.FAILED
    assert [f["step"] for f in decision.failures] == ["validate_conf", "discover", "plan"]


def test_a_failed_grouping_is_a_warning() -> None:
    decision = decide_outcome(ACME, _states({("dedup", -1): "failed"}))
    assert decision.outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS
    assert [w["step"] for w in decision.warnings] == ["dedup"]


def test_a_failed_warehouse_sync_is_a_warning() -> None:
    decision = decide_outcome(ACME, _states({("warehouse_sync", -1): "failed"}))
    assert decision.outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS
    assert [w["step"] for w in decision.warnings] == ["warehouse_sync"]
