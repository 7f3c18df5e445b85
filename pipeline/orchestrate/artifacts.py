"""Run artifacts in the store: what a run discovered and how it was planned, as small JSON objects.

XCom carries ids, counts and URIs only; the lists behind them live here::

    runs/<pipeline_run_id>/discovery.json          candidates and files passed over (with why)
    runs/<pipeline_run_id>/plan.json               the plan's figures (k, imbalance, method, sizing reasons)
    runs/<pipeline_run_id>/batches/<index>.json    one batch: its files, planned bytes, offset and pace
    runs/<pipeline_run_id>/pace/<step>.json        the last start reserved for a step (staggering)

A re-run of the same run overwrites them (same keys), so a retried task never leaves a second copy.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from pipeline.errors import StoreError

if TYPE_CHECKING:
    from pipeline.store import Store

RUNS = "runs"


def discovery_key(pipeline_run_id: int) -> str:
    return f"{RUNS}/{pipeline_run_id}/discovery.json"


def plan_key(pipeline_run_id: int) -> str:
    return f"{RUNS}/{pipeline_run_id}/plan.json"


def batch_key(pipeline_run_id: int, batch_index: int) -> str:
    return f"{RUNS}/{pipeline_run_id}/batches/{batch_index}.json"


def pace_key(pipeline_run_id: int, step: str) -> str:
    return f"{RUNS}/{pipeline_run_id}/pace/{step}.json"


def write_json(store: Store, key: str, payload: Any) -> str:
    """Write ``payload`` under ``key`` (staged, then renamed into place); returns its URL."""
    data = json.dumps(payload, indent=1, sort_keys=True, default=str).encode()
    final = store.path(key)
    staging = f"{final}.{uuid.uuid4().hex}.tmp"
    try:
        store.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        store.fs.pipe_file(staging, data)
        store.fs.mv(staging, final)
    except OSError as exc:
        raise StoreError(f"cannot write run artifact {store.url(key)}: {exc}") from exc
    return store.url(key)


def read_json(store: Store, key: str) -> Any:
    """Read the JSON object under ``key``; a missing one is a :class:`~pipeline.errors.StoreError`."""
    try:
        return json.loads(store.fs.cat_file(store.path(key)))
    except FileNotFoundError:
        raise StoreError(f"run artifact {store.url(key)} does not exist") from None
    except OSError as exc:
        raise StoreError(f"cannot read run artifact {store.url(key)}: {exc}") from exc
