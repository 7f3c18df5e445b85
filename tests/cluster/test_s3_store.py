"""The store and a vendor source on s3:// through s3fs, against a local S3-protocol server the suite starts.

A robot drop with defects is uploaded to a bucket, and the run-level functions a DAG's tasks call take it
from there into a store in another bucket: discover, plan, ingest, pre-gate, transcode, post-gate, shard,
warehouse sync, then a dataset whose manifest is read back from s3:// as a training rank reads it. Only the
environment names the endpoint and the keys.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import s3fs
from cluster_helpers import robot_vendor_file, s3_robot_vendor

from pipeline.config import load_vendor
from pipeline.enums import FileState, StepName
from pipeline.orchestrate import discover, plan, run_batch_step, start_run, validate_conf
from pipeline.orchestrate.run import warehouse_sync
from pipeline.services.s3server import LocalS3Server, make_buckets
from pipeline.settings import Settings, load_settings
from pipeline.steps.runner import build_context
from pipeline.synth import RobotDropConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DROP = RobotDropConfig(
    episodes=1, seconds=1.5, width=64, height=48, defects=("truncated", "crc_flipped", "duplicate")
)
STEPS = (
    StepName.INGEST,
    StepName.QUALITY_PRE,
    StepName.TRANSCODE,
    StepName.QUALITY_POST,
    StepName.SHARD,
)


def test_a_drop_on_s3_lands_in_an_s3_store_and_its_manifest_reads_back(
    s3_server: LocalS3Server, tmp_path: Path, migrated_database_url: str
) -> None:
    from pipeline.datasets import build, load_spec
    from pipeline.manifest.loader import open_manifest

    make_buckets("sluice-drops", "sluice-store")
    manifest, vendor_file = s3_robot_vendor(tmp_path, DROP)
    fs = s3fs.S3FileSystem()
    raw_before = {f.path: f.sha256 for f in manifest.files}
    vendor = load_vendor(vendor_file)
    settings = _settings(tmp_path, migrated_database_url, "s3://sluice-store")
    ctx = build_context(settings)
    try:
        run_id = start_run(
            ctx,
            vendor,
            dag_id=vendor.name,
            run_id="manual__s3",
            toggles=validate_conf(vendor, {"shard": True}),
        )
        found = discover(ctx, vendor, run_id)
        assert found["n_candidates"] == len(manifest.files)
        assert found["listing_uri"].startswith("s3://sluice-store/")
        batch_ids = plan(ctx, vendor, run_id)["batch_ids"]
        for step in STEPS:
            for batch_id in batch_ids:
                done = run_batch_step(settings, vendor, step, run_id, batch_id, ctx=ctx)
                assert done["failed"] == 0, done
        warehouse_sync(ctx)
        states = _file_states(ctx.engine)
        # the drop's few sessions would hash into val or eval as likely as into train: all train, as a
        # user building a version of a handful of episodes sets it
        spec = load_spec(REPO / "dags" / "datasets" / "demo_accepted.yaml")
        spec = spec.model_copy(
            update={"splits": spec.splits.model_copy(update={"val_fraction": 0.0, "eval_fraction": 0.0})}
        )
        version = build(
            spec,
            engine=ctx.engine,
            warehouse_path=settings.warehouse_path,
            store=ctx.store,
        )
    finally:
        ctx.engine.dispose()

    # Which of two names of the same bytes is the original depends on which batch registered it first (the
    # plan orders by size and listing time, and an S3 listing's times are the upload's): one of them is.
    expected = {
        f.path: (f.expected_state.value, sorted(r.value for r in f.expected_reasons)) for f in manifest.files
    }
    pair = {f.path for f in manifest.files if f.duplicate_of} | {
        f.duplicate_of for f in manifest.files if f.duplicate_of
    }
    assert {p: s for p, s in states.items() if p not in pair} == {
        p: s for p, s in expected.items() if p not in pair
    }
    assert sorted(states[p] for p in pair) == [("accepted", []), ("duplicate", [])]
    # Raw bytes: every input's object is in the store's raw area under its sha256, and the source is unchanged.
    for f in manifest.files:
        assert (
            fs.cat_file(f"sluice-drops/acme/{f.path}")
            and hashlib.sha256(fs.cat_file(f"sluice-drops/acme/{f.path}")).hexdigest() == raw_before[f.path]
        )
        assert fs.exists(f"sluice-store/raw/{f.sha256}")
    assert not fs.exists("sluice-store/tmp") or fs.ls("sluice-store/tmp") == []  # nothing staged is left
    assert fs.ls("sluice-store/derived/transcode"), "no transcoded output in the S3 store"
    assert fs.ls("sluice-store/shards"), "no shard in the S3 store"
    accepted = [
        f for f in manifest.files if f.expected_state in (FileState.ACCEPTED, FileState.ACCEPTED_WITH_FLAGS)
    ]
    assert version.manifest_uri and version.manifest_uri.startswith("s3://sluice-store/manifests/")
    assert version.row_count == len(accepted)
    loaded = open_manifest(
        version.manifest_uri, rank=0, world_size=1, split=None, cache_dir=tmp_path / "cache"
    )
    assert loaded.total_rows == len(accepted)
    rows = [row for batch in loaded.batches(16) for row in batch.to_pylist()]
    assert len(rows) == len(accepted)
    assert all(
        str(uri).startswith("s3://sluice-store/")
        for row in rows
        for key, uri in row.items()
        if key.endswith("uri") and uri
    )


def _settings(tmp_path: Path, database_url: str, store_url: str) -> Settings:
    """This test's settings: a home and vendors folder under ``tmp_path``, the store at ``store_url``."""
    return load_settings(
        home=tmp_path / "home",
        database_url=database_url,
        store_url=store_url,
        vendors_dir=tmp_path / "vendors",
        project_dir=tmp_path,
    )


def _file_states(engine: object) -> dict[str, tuple[str, list[str]]]:
    import sqlalchemy as sa

    query = sa.text(
        "SELECT sf.path, e.state, e.reasons FROM episodes e JOIN source_files sf ON sf.id = e.source_file_id"
    )
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return {r.path: (r.state, sorted(r.reasons or [])) for r in conn.execute(query)}


def test_a_store_out_of_reach_is_one_clean_error_for_scrub_and_a_note_in_the_report(
    s3_server: LocalS3Server, tmp_path: Path, migrated_database_url: str
) -> None:
    """With the S3 endpoint gone (stopped, or credentials missing), `sluice scrub` says it cannot reach the
    store, once, instead of a botocore traceback (or every object listed as unreadable), and `sluice report`
    still renders, each thumbnail saying why it has no picture."""
    import os
    import socket
    import subprocess
    import sys

    from pipeline.synth.generate import make_robot_drop

    make_buckets("sluice-store-reach")
    make_robot_drop(
        tmp_path / "drop", RobotDropConfig(episodes=1, seconds=1.0, width=64, height=48, defects=())
    )
    sluice = Path(sys.executable).with_name("sluice")
    env = dict(os.environ) | {
        "SLUICE_HOME": str(tmp_path / "home"),
        "SLUICE_DATABASE_URL": migrated_database_url,
        "SLUICE_STORE_URL": "s3://sluice-store-reach",
    }

    def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(sluice), *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    vendor = load_vendor(robot_vendor_file(tmp_path, str(tmp_path / "drop")))
    settings = _settings(tmp_path, migrated_database_url, "s3://sluice-store-reach")
    ctx = build_context(settings)
    try:  # a recorded run whose inputs are in the S3 store, as a DAG's tasks make it
        run_id = start_run(
            ctx, vendor, dag_id=vendor.name, run_id="manual__reach", toggles=validate_conf(vendor, {})
        )
        discover(ctx, vendor, run_id)
        for batch_id in plan(ctx, vendor, run_id)["batch_ids"]:
            for step in (StepName.INGEST, StepName.QUALITY_PRE):
                assert run_batch_step(settings, vendor, step, run_id, batch_id, ctx=ctx)["failed"] == 0
    finally:
        ctx.engine.dispose()
    with socket.socket() as probe:  # a port nothing answers on
        probe.bind(("127.0.0.1", 0))
        gone = probe.getsockname()[1]
    unreachable = env | {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{gone}", "AWS_MAX_ATTEMPTS": "1"}
    scrub = run("scrub", env=unreachable)
    assert scrub.returncode == 2 and "Traceback" not in scrub.stderr, scrub.stderr
    assert "cannot reach s3://sluice-store-reach/raw/" in scrub.stderr, scrub.stderr
    assert "EndpointConnectionError" in scrub.stderr, scrub.stderr
    report = run("report", "latest", env=unreachable)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    written = Path(report.stdout.split("report written to ")[1].split()[0])
    assert "the raw file cannot be read: EndpointConnectionError" in written.read_text()
    assert run("scrub", env=env).returncode == 0  # the endpoint back: nothing was wrong with the objects


def test_an_ad_hoc_ingest_takes_an_s3_url_as_given(
    s3_server: LocalS3Server, tmp_path: Path, migrated_database_url: str
) -> None:
    """`sluice ingest s3://bucket/prefix --kind mcap` lists the bucket (its PATH argument was a Path, which
    folded `s3://` into a local folder `s3:/`)."""
    import os
    import subprocess
    import sys

    from pipeline.synth.generate import make_robot_drop

    make_buckets("sluice-adhoc")
    make_robot_drop(
        tmp_path / "drop", RobotDropConfig(episodes=1, seconds=1.0, width=64, height=48, defects=())
    )
    s3fs.S3FileSystem().put(str(tmp_path / "drop") + "/", "sluice-adhoc/logs/", recursive=True)
    env = dict(os.environ) | {
        "SLUICE_HOME": str(tmp_path / "home"),
        "SLUICE_DATABASE_URL": migrated_database_url,
    }
    sluice = str(Path(sys.executable).with_name("sluice"))
    args = ["ingest", "s3://sluice-adhoc/logs", "--kind", "mcap", "--settle-s", "0", "--json"]
    done = subprocess.run(
        [sluice, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["discovered"] >= 1 and report["vendor"].startswith("adhoc_logs_"), report
    missing = subprocess.run(
        [sluice, "ingest", "s3://sluice-adhoc/nothing", "--kind", "mcap"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert missing.returncode == 2, missing.stderr
    assert "source folder s3://sluice-adhoc/nothing does not exist" in missing.stderr, missing.stderr
