"""Steps for the DAG tests: the registered implementations, wrapped so that a test can inject failures.

Every step the resolver hands out is wrapped so that a test can make chosen items fail through data, not
global state: a ``_failures.json`` file in the vendor's source folder (outside the input globs) maps a step
name to the item keys it must fail on, e.g. ``{"annotate": ["ep_0001.mcap"]}``; under
``"transcode_encoder_crash"`` the transcode's encoder process handling that item dies of a segmentation
fault, in the step's real worker pool. Every item a step really
processes (not one the runner skipped as already done) is appended to ``tmp/calls.jsonl`` in the store, so
that tests can tell resumed work from redone work.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.enums import StepName
from pipeline.steps.base import Step, StepResult, WorkItem

FAILURES_FILE = "_failures.json"
CALLS_KEY = "tmp/calls.jsonl"


def step_class(name: StepName | str) -> type[Step]:
    """The class the DAG's task runs for ``name``: the registered step, with failure injection."""
    from pipeline.steps.registry import step_class as registered

    base = registered(StepName(name))
    return type(f"Injected{base.__name__}", (FailureInjection, base), {})


def crash() -> None:
    """Die as a crashing codec would: a segmentation fault in the encoder process."""
    import ctypes

    ctypes.string_at(0)


def source_root(step: Step) -> Path:
    return Path(step.vendor.source_url(step.ctx.settings.project_dir_abs))


def read_calls(store_root: Path) -> list[dict[str, object]]:
    """Every item a step processed, in order (``step``, ``key``, ``episode_id``)."""
    path = store_root / CALLS_KEY
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


class FailureInjection(Step):
    """Fails the items ``_failures.json`` names for this step; logs every item processed."""

    def process(self, item: WorkItem) -> StepResult:
        failures_file = source_root(self) / FAILURES_FILE
        if failures_file.exists():
            failures = json.loads(failures_file.read_text())
            doomed = failures.get(self.name.value, [])
            if item.key in doomed or item.source_path in doomed:
                raise RuntimeError(f"injected failure of {self.name.value} on {item.key}")
            pool = getattr(self, "_executor", None)
            if pool is not None and item.key in failures.get(f"{self.name.value}_encoder_crash", []):
                pool.submit(crash).result()
        result = super().process(item)
        log_path = Path(self.ctx.store.path(CALLS_KEY))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as log:
            episode = result.episode_id if result.episode_id is not None else item.episode_id
            record = {
                "vendor": self.vendor.name,
                "step": self.name.value,
                "key": item.key,
                "episode_id": episode,
            }
            log.write(json.dumps(record) + "\n")
        return result
