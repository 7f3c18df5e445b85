"""Fault: the S3 server stops during ingest and comes back; the ingest is retried and publishes nothing partial.

The server is durable (:class:`~pipeline.services.s3server.LocalS3Server` with ``durable=True``): a stop
and a start keep its objects, as a real endpoint's outage does. The stop comes the moment the first
staging copy of the store is written (``tmp/...``), so a landing is cut between staging and publishing.
Requests during the outage fail; botocore retries each a few times, then the step fails and is retried
as Airflow retries a task (``RETRIES`` attempts, ``RETRY_DELAY_S`` apart), until the server is back.

Checked against an undisturbed run of the same drop (its own catalog and store bucket): every input in
exactly one state and the same one, no duplicate rows, nothing left under ``tmp/``, every raw object's
bytes hash to its key and the source is unchanged, the transcoded outputs byte-identical.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import s3fs
import sqlalchemy as sa
from cluster_helpers import opt_in, s3_robot_vendor

from pipeline.catalog import migrate
from pipeline.config import load_vendor
from pipeline.enums import StepName
from pipeline.orchestrate import discover, plan, run_batch_step, start_run, validate_conf
from pipeline.services.s3server import LocalS3Server, client_environment, make_buckets
from pipeline.settings import load_settings
from pipeline.steps.runner import build_context
from pipeline.synth import RobotDropConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow, opt_in("stops and restarts an S3 server (85-200 s)")]

DROP = RobotDropConfig(
    episodes=2, seconds=1.5, width=64, height=48, defects=("truncated", "crc_flipped", "duplicate")
)
STEPS = (StepName.INGEST, StepName.QUALITY_PRE, StepName.TRANSCODE)
#: How long the server stays down beyond its own stop and start (which take seconds: moto's import): longer
#: than botocore's retries of one request (5 attempts, at most 1 + 2 + 4 + 8 s apart), as a real outage is, so
#: that a landing's own clean-up of its staging copy fails too.
OUTAGE_S = 20.0
#: Task retries, as a DAG's ``retries`` (the vendor DAGs retry their tasks) and their delay.
RETRIES = 8
RETRY_DELAY_S = 3.0


@pytest.fixture(scope="module")
def durable_s3() -> Iterator[LocalS3Server]:
    server = LocalS3Server(Path(tempfile.mkdtemp(prefix="sluice-test-s3-durable-")), durable=True)
    server.up()
    # s3fs keeps one filesystem per set of arguments, whose endpoint came from the environment when it was
    # made: one made for another server earlier in the session would keep talking to that one.
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with client_environment(server):
            yield server
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.down()


@dataclass
class Outage:
    """What the fault did and what it cost: filled in by the fault thread and the retry loop."""

    stopped_at: float | None = None
    back_at: float | None = None
    recovered_at: float | None = None  # the first step attempt that succeeded after the stop
    step_failures: list[str] = field(default_factory=list)
    botocore_retries: int = 0
    details: list[str] = field(default_factory=list)


class _RetryCounter(logging.Handler):
    """Counts botocore's "Retry needed" lines (its legacy retry handler, which aiobotocore shares)."""

    def __init__(self, outage: Outage) -> None:
        super().__init__(logging.DEBUG)
        self.outage = outage

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Retry needed"):
            self.outage.botocore_retries += 1


def test_s3_restart_during_ingest_is_retried_and_publishes_nothing_partial(
    durable_s3: LocalS3Server, tmp_path: Path, fresh_database_url: Callable[[], str]
) -> None:
    make_buckets("sluice-drops", "sluice-ref", "sluice-store")
    manifest, _ = s3_robot_vendor(tmp_path, DROP)
    fs = s3fs.S3FileSystem()
    source_before = {f.path: f.sha256 for f in manifest.files}

    reference = _run(tmp_path, "ref", "sluice-ref", fresh_database_url, outage=None, server=durable_s3)
    outage = Outage()
    disturbed = _run(tmp_path, "disturbed", "sluice-store", fresh_database_url, outage, durable_s3)

    assert outage.stopped_at is not None and outage.back_at is not None, "the server was never stopped"
    assert outage.step_failures, "no step failed: the outage did not reach the ingest"
    assert outage.recovered_at is not None
    figures = {
        "step_retries": len(outage.step_failures),
        "step_failures": sorted(set(outage.step_failures)),
        "botocore_retries": outage.botocore_retries,
        "down_s": round(outage.back_at - outage.stopped_at, 1),
        "recover_s": round(outage.recovered_at - outage.stopped_at, 1),
    }
    print(f"S3 restart during ingest: {json.dumps(figures)}")
    print("\n".join(outage.details))

    # Every input in exactly one state, the undisturbed run's; no duplicate rows. Which of two names of the
    # same bytes is the original depends on which landed first, which a retry may change: one of them is.
    pair = {f.path for f in manifest.files if f.duplicate_of} | {
        f.duplicate_of for f in manifest.files if f.duplicate_of
    }
    assert _without(disturbed["states"], pair) == _without(reference["states"], pair)
    assert sorted(disturbed["states"][p] for p in pair) == sorted(reference["states"][p] for p in pair)
    assert len(disturbed["states"]) == len(manifest.files)
    assert disturbed["duplicates"] == [] and reference["duplicates"] == []
    # Raw bytes: the same objects; each object's bytes hash to its key; the source is unchanged.
    assert disturbed["raw"] == reference["raw"]
    for key in disturbed["raw"]:
        assert hashlib.sha256(fs.cat_file(f"sluice-store/{key}")).hexdigest() == key.removeprefix("raw/")
    fs.invalidate_cache()
    for path, sha in source_before.items():
        assert hashlib.sha256(fs.cat_file(f"sluice-drops/acme/{path}")).hexdigest() == sha
    # Nothing partial is visible: no staging copy left, no object the catalog does not know.
    assert fs.find("sluice-store/tmp") == []
    # The outputs are byte-identical to the undisturbed run's.
    assert disturbed["outputs"] and disturbed["outputs"] == reference["outputs"]


def _run(
    tmp_path: Path,
    name: str,
    bucket: str,
    fresh_database_url: Callable[[], str],
    outage: Outage | None,
    server: LocalS3Server,
) -> dict[str, Any]:
    """One run of the drop into ``bucket`` with a catalog of its own; with ``outage``, the server stops
    during the ingest and each step is retried until it succeeds."""
    url = fresh_database_url()
    migrate.upgrade(url)
    vendor = load_vendor(tmp_path / "vendors" / "acme_robotics.yaml")
    settings = load_settings(
        home=tmp_path / name,
        database_url=url,
        store_url=f"s3://{bucket}",
        vendors_dir=tmp_path / "vendors",
        project_dir=tmp_path,
    )
    ctx = build_context(settings)
    try:
        run_id = start_run(
            ctx, vendor, dag_id=vendor.name, run_id=f"manual__{name}", toggles=validate_conf(vendor, {})
        )
        discover(ctx, vendor, run_id)
        batch_ids = plan(ctx, vendor, run_id)["batch_ids"]
        fault = None
        if outage is not None:
            fault = threading.Thread(target=_stop_and_restart, args=(server, bucket, outage), daemon=True)
            fault.start()
        counter = _RetryCounter(outage) if outage is not None else None
        botocore_log = logging.getLogger("botocore.retryhandler")
        if counter is not None:
            botocore_log.addHandler(counter)
            botocore_log.setLevel(logging.DEBUG)
        try:
            for step in STEPS:
                for batch_id in batch_ids:
                    attempt = functools.partial(
                        run_batch_step, settings, vendor, step, run_id, batch_id, ctx=ctx
                    )
                    done = _with_retries(attempt, outage)
                    assert done["failed"] == 0, done
        finally:
            if counter is not None:
                botocore_log.removeHandler(counter)
        if fault is not None:
            fault.join(timeout=120)
        return _end_state(ctx.engine, ctx.store.fs, bucket)
    finally:
        ctx.engine.dispose()


def _with_retries(attempt: Callable[[], dict[str, Any]], outage: Outage | None) -> dict[str, Any]:
    """``attempt`` retried as Airflow retries a task; without an outage, exactly once."""
    for _ in range(RETRIES + 1 if outage is not None else 1):
        try:
            done = attempt()
        except Exception as exc:  # Airflow retries a task on any exception
            if outage is None:
                raise
            outage.step_failures.append(type(exc).__name__)
            outage.details.append(str(exc)[:300])
            time.sleep(RETRY_DELAY_S)
            continue
        if outage is not None and outage.stopped_at is not None and outage.recovered_at is None:
            outage.recovered_at = time.monotonic()
        return done
    raise AssertionError(f"still failing after {RETRIES} retries: {outage}")


def _stop_and_restart(server: LocalS3Server, bucket: str, outage: Outage) -> None:
    """Stop the server the moment a staging copy is written to ``bucket``'s tmp/, start it again later."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not _staged(server.recording, bucket):
        time.sleep(0.02)
    outage.stopped_at = time.monotonic()
    server.down()
    time.sleep(OUTAGE_S)
    server.up()
    outage.back_at = time.monotonic()


def _staged(recording: Path, bucket: str) -> bool:
    for line in recording.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry["method"] == "PUT" and f"/{bucket}/tmp/" in entry["url"]:
            return True
    return False


def _end_state(engine: sa.Engine, fs: Any, bucket: str) -> dict[str, Any]:
    with engine.connect() as conn:
        states = {
            r.path: (r.state, sorted(r.reasons or []))
            for r in conn.execute(
                sa.text(
                    "SELECT sf.path, e.state, e.reasons FROM episodes e "
                    "JOIN source_files sf ON sf.id = e.source_file_id"
                )
            )
        }
        duplicates = [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT path, count(*) FROM source_files GROUP BY vendor_id, path HAVING count(*) > 1"
                )
            )
        ]
        outputs = sorted(
            (r.kind, r.sha256)
            for r in conn.execute(
                sa.text(
                    "SELECT sf.path, a.kind, a.sha256 FROM artifacts a JOIN episodes e ON e.id = a.episode_id "
                    "JOIN source_files sf ON sf.id = e.source_file_id WHERE a.step = 'transcode'"
                )
            )
        )
    fs.invalidate_cache()
    raw = sorted(p.removeprefix(f"{bucket}/") for p in fs.find(f"{bucket}/raw"))
    return {"states": states, "duplicates": duplicates, "outputs": outputs, "raw": raw}


def _without(states: dict[str, Any], paths: set[str]) -> dict[str, Any]:
    return {p: s for p, s in states.items() if p not in paths}
