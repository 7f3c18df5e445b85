"""Every input lands once: re-runs add nothing, concurrent runs and a kill -9 leave no duplicate and no partial
object, a changed file becomes a new input (whatever its size and mtime), names are kept apart byte for
byte, links never take a file from outside the drop, and a flipped bit in the raw store is found."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from ingest_helpers import (
    ACME,
    REPO,
    blobs,
    copy_drop,
    episode_rows,
    make_context,
    sha256_of,
    table_counts,
    vendor_config,
)

from pipeline.config import VendorConfig
from pipeline.enums import TERMINAL_FILE_STATES, FileState
from pipeline.steps.base import WorkItem
from pipeline.synth import expected_outcome
from pipeline.synth.drop import DropManifest
from pipeline.vendor_ingest import ingest_vendor

pytestmark = pytest.mark.integration

#: A child process that ingests one vendor; it waits for ``go`` so that two children start together.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from pipeline.catalog import make_engine
    from pipeline.config import load_vendor
    from pipeline.settings import Settings
    from pipeline.steps.base import StepContext
    from pipeline.store import Store
    from pipeline.vendor_ingest import ingest_vendor

    vendor_file, url, store, home, go, gate = sys.argv[1:7]
    vendor = load_vendor(Path(vendor_file))
    ctx = StepContext(
        settings=Settings(home=Path(home), database_url=url),
        engine=make_engine(url),
        store=Store(store),
        code_version="test",
    )
    while not Path(go).exists():
        time.sleep(0.005)
    report = ingest_vendor(vendor, ctx, settle_s=0, gate=gate == "gate")
    print(json.dumps(report.as_dict()))
    """
)


#: ``sluice scrub`` on its own (the whole CLI mounts every command group).
SCRUB = (
    "import typer; from pipeline.cli.scrub import command; app = typer.Typer(); app.command()(command); app()"
)


def _child(vendor_file: Path, url: str, base: Path, go: Path, *, gate: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(vendor_file),
            url,
            str(base / "store"),
            str(base / "home"),
            str(go),
            "gate" if gate else "land",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _vendor_file(vendor_name: str, root: Path) -> Path:
    return next(root.parent.glob(f"vendor-{vendor_name}-*/{vendor_name}.yaml"))


def _raw_listing(base: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (base / "store" / "raw").iterdir()}


def _acme_drop(
    tmp_path: Path, robot_drop: tuple[Path, DropManifest]
) -> tuple[Path, VendorConfig, DropManifest]:
    """A writable copy of the robot drop under ``tmp_path``, the acme vendor reading it, and its manifest."""
    template, manifest = robot_drop
    root = copy_drop(template, tmp_path / "acme")
    return root, vendor_config(ACME, root), manifest


def _assert_one_row_per_input(
    url_engine: sa.Engine, manifest: DropManifest, extra: dict[str, FileState]
) -> None:
    rows = episode_rows(url_engine)
    expected = {f.path: expected_outcome(f.defect)[0] for f in manifest.files} | extra
    assert {p: FileState(r["state"]) for p, r in rows.items()} == expected
    with url_engine.connect() as conn:
        dup_rows = conn.execute(
            sa.text(
                "SELECT (SELECT count(*) - count(DISTINCT path) FROM source_files) + "
                "(SELECT count(*) - count(DISTINCT source_file_id) FROM episodes) + "
                "(SELECT count(*) - count(DISTINCT sha256) FROM blobs) + "
                "(SELECT count(*) - count(DISTINCT (episode_id, step, config_hash)) FROM step_runs) + "
                "(SELECT count(*) - count(DISTINCT (episode_id, gate, check_name, config_hash)) FROM check_results)"
            )
        ).scalar_one()
    assert dup_rows == 0


def test_ingesting_the_same_drop_twice_adds_nothing(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    _, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    first = ingest_vendor(vendor, ctx, settle_s=0)
    counts, raw, rows = table_counts(ctx.engine), _raw_listing(tmp_path), episode_rows(ctx.engine)
    assert first.steps["ingest"]["succeeded"] == len(manifest.files)

    second = ingest_vendor(vendor, ctx, settle_s=0)
    assert table_counts(ctx.engine) == counts
    assert _raw_listing(tmp_path) == raw
    assert episode_rows(ctx.engine) == rows
    assert second.steps["ingest"]["skipped"] == len(manifest.files)
    assert (
        second.steps["quality_pre"]["skipped"]
        == first.steps["quality_pre"]["succeeded"] + (first.steps["quality_pre"]["rejected"])
    )
    assert second.states == first.states


def test_two_concurrent_ingests_of_one_vendor_leave_no_duplicates(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    go = tmp_path / "go"
    children = [
        _child(_vendor_file(vendor.name, root), migrated_database_url, tmp_path, go, gate=True) for _ in "ab"
    ]
    time.sleep(0.5)
    go.touch()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    engine = make_context(tmp_path, migrated_database_url).engine
    _assert_one_row_per_input(engine, manifest, {})
    # each file was landed and registered by one child or the other; together they did every file
    assert all(r["discovered"] == len(manifest.files) for r in reports)
    assert len(_raw_listing(tmp_path)) == len({f.sha256 for f in manifest.files})
    duplicate = manifest.by_defect("duplicate")[0]
    assert episode_rows(engine)[duplicate.path]["duplicate_of"] == duplicate.duplicate_of
    # and gated once between them: an episode one child gates, the other skips
    gated = sum(
        r["steps"]["quality_pre"]["succeeded"] + r["steps"]["quality_pre"]["rejected"] for r in reports
    )
    gatable = sum(1 for r in episode_rows(engine).values() if r["state"] != "duplicate")
    assert gated == gatable, [r["steps"]["quality_pre"] for r in reports]


def test_an_episode_another_worker_held_and_let_go_unfinished_is_gated_after_the_others(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    """A worker that finds an episode claimed goes on with the others, then waits for the claim: if its
    holder stopped without a final outcome (failed, died), the episode is gated here, not skipped."""
    import threading

    from pipeline.steps.quality_pre import QualityPreStep
    from pipeline.steps.runner import Claim, claimed, run_step
    from pipeline.vendor_ingest import discover_vendor

    _, vendor, _ = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    found = discover_vendor(vendor, ctx.settings.project_dir_abs, settle_s=0)
    files = [WorkItem(key=c.path, source_path=c.path, size_bytes=c.size_bytes) for c in found.candidates]
    held = next(iter(QualityPreStep(vendor, ctx).items(files)))
    claim_held, let_go, seen = threading.Event(), threading.Event(), []

    def other_worker() -> None:
        with claimed(QualityPreStep(vendor, ctx), held, wait=False) as claim:
            seen.append(claim)
            claim_held.set()
            let_go.wait(300)

    holder = threading.Thread(target=other_worker)
    holder.start()
    assert claim_held.wait(60) and seen == [Claim.MINE]

    def final_quality_pre() -> set[int]:
        with ctx.engine.connect() as conn:
            return set(
                conn.execute(
                    sa.text(
                        "SELECT episode_id FROM step_runs WHERE step = 'quality_pre' "
                        "AND status IN ('succeeded', 'rejected')"
                    )
                ).scalars()
            )

    summaries: list[object] = []
    runner = threading.Thread(target=lambda: summaries.append(run_step(QualityPreStep(vendor, ctx), files)))
    runner.start()
    others = {i.episode_id for i in QualityPreStep(vendor, ctx).items(files)} - {held.episode_id}
    deadline = time.monotonic() + 300
    while not others <= final_quality_pre():  # the runner went past the held episode
        assert runner.is_alive() and time.monotonic() < deadline
        time.sleep(0.2)
    assert held.episode_id not in final_quality_pre()
    let_go.set()  # the holder gives up without an outcome
    holder.join()
    runner.join(300)
    (summary,) = summaries
    assert held.episode_id in final_quality_pre()
    assert summary.skipped == 0 and summary.succeeded + summary.rejected == len(others) + 1  # type: ignore[attr-defined]


def test_kill_9_during_ingest_then_ingest_again(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    big = root / "aaa-big.mcap"  # sorts first: the child is landing it when killed
    with open(big, "wb") as fh:
        for _ in range(24):
            fh.write(os.urandom(8 << 20))  # 192 MiB: landing takes long enough to be caught mid-copy
    go = tmp_path / "go"
    go.touch()
    child = _child(_vendor_file(vendor.name, root), migrated_database_url, tmp_path, go, gate=False)
    staging = tmp_path / "store" / "tmp"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if staging.is_dir() and any(p.stat().st_size > 0 for p in staging.iterdir()):
            break
        time.sleep(0.002)
    assert child.poll() is None, "the child finished before it could be killed mid-landing"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    partial = [p for p in staging.iterdir() if p.stat().st_size < big.stat().st_size]
    assert partial  # the kill interrupted a copy...
    for obj in (tmp_path / "store" / "raw").iterdir():  # ...and nothing partial is visible in raw/
        assert sha256_of(obj) == obj.name

    # The killed lander's staging file is abandoned: once older than the settings' limit, the next ingest
    # removes it; a staging file of a landing still in progress (fresh) is left alone.
    two_days_ago = time.time() - 2 * 24 * 3600
    for path in partial:
        os.utime(path, (two_days_ago, two_days_ago))
    live = staging / "live-landing"
    live.write_bytes(b"in progress")

    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0)
    _assert_one_row_per_input(ctx.engine, manifest, {"aaa-big.mcap": FileState.QUARANTINED})
    assert episode_rows(ctx.engine)["aaa-big.mcap"]["reasons"] == ["bad_magic"]
    assert sorted(staging.iterdir()) == [live]
    assert list(ctx.store.scrub(blobs(ctx.engine))) == []
    assert set(_raw_listing(tmp_path)) == {sha for sha, _ in blobs(ctx.engine)}


def test_a_changed_file_is_a_new_input_and_the_old_content_is_kept(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0)
    clean = manifest.by_defect(None)
    target, other = root / clean[0].path, root / clean[1].path
    old_sha = sha256_of(target)
    assert target.stat().st_size != other.stat().st_size
    target.write_bytes(other.read_bytes())  # re-delivered with other (valid) content
    os.utime(target)
    ingest_vendor(vendor, ctx, settle_s=0)
    rows = episode_rows(ctx.engine)
    versions = {p: r for p, r in rows.items() if p.startswith(clean[0].path)}
    assert len(versions) == 2
    new_alias = f"{clean[0].path} [version 2]"
    assert rows[clean[0].path]["sha256"] == old_sha and rows[clean[0].path]["state"] == "accepted"
    assert rows[new_alias]["state"] == "duplicate" and rows[new_alias]["duplicate_of"] == clean[1].path
    assert all(FileState(r["state"]) in TERMINAL_FILE_STATES for r in rows.values())
    assert ctx.store.has_raw(old_sha)


def test_a_bit_flipped_in_a_stored_object_is_found_by_scrub(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    _, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    assert list(ctx.store.scrub(blobs(ctx.engine))) == []
    victim = manifest.by_defect(None)[0].sha256
    path = ctx.store.local_raw_path(victim)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    path.chmod(0o444)

    findings = list(ctx.store.scrub(blobs(ctx.engine)))
    assert [(f.sha256, f.problem) for f in findings] == [(victim, "hash")]
    # the operator's command reports it too, and fails
    env = {
        **os.environ,
        "SLUICE_DATABASE_URL": migrated_database_url,
        "SLUICE_STORE_URL": str(tmp_path / "store"),
        "SLUICE_HOME": str(tmp_path / "home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRUB, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    reported = json.loads(done.stdout)
    assert [f["sha256"] for f in reported["findings"]] == [victim]


def test_a_same_size_change_with_its_old_mtime_is_a_new_input(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    """Identity is the hash: a re-delivery of other bytes of the same size, even with the old mtime put
    back, is landed, registered as the path's next version and gated."""
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0)
    target = root / manifest.by_defect(None)[0].path
    before = target.stat()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes (the pre-gate's CRCs will say what they are)
    target.write_bytes(bytes(data))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)

    report = ingest_vendor(vendor, ctx, settle_s=0)
    rows = episode_rows(ctx.engine)
    path = manifest.by_defect(None)[0].path
    assert rows[f"{path} [version 2]"]["sha256"] == sha256_of(target)
    assert rows[path]["sha256"] != sha256_of(target) and rows[path]["state"] == "accepted"
    assert FileState(rows[f"{path} [version 2]"]["state"]) in TERMINAL_FILE_STATES
    assert report.steps["ingest"]["succeeded"] == 1  # the others were provably unchanged
    assert ctx.store.has_raw(sha256_of(target))


def test_a_touched_file_is_hashed_once_more_then_skipped(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    ctx = make_context(tmp_path, migrated_database_url)
    ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    counts = table_counts(ctx.engine)
    os.utime(root / manifest.by_defect(None)[0].path)  # touched, not changed
    again = ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    assert (again.steps["ingest"]["succeeded"], again.steps["ingest"]["skipped"]) == (
        1,
        len(manifest.files) - 1,
    )
    assert table_counts(ctx.engine) == counts  # the same content: no new version, no new row
    third = ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    assert third.steps["ingest"]["skipped"] == len(manifest.files)


def test_names_are_kept_apart_byte_for_byte(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    """A name holding ``#sha256=`` is a name like any other; a raw 0xff byte and the text ``\\xff`` are two
    names; a re-run finds all of them done."""
    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    clean = [root / f.path for f in manifest.by_defect(None)]
    folder = clean[0].parent
    hashy = folder / f"ep#sha256={sha256_of(clean[0])[:16]}.mcap"
    raw_byte = Path(os.fsdecode(bytes(folder) + b"/ep-\xff.mcap"))
    text_escape = folder / "ep-\\xff.mcap"
    for name, src in ((hashy, clean[0]), (raw_byte, clean[1]), (text_escape, clean[0])):
        name.write_bytes(src.read_bytes())
    ctx = make_context(tmp_path, migrated_database_url)
    first = ingest_vendor(vendor, ctx, settle_s=0)
    rows = episode_rows(ctx.engine)
    relative = folder.relative_to(root).as_posix()
    expected = {  # catalog text -> the file it must name
        f"{relative}/ep#sha256={sha256_of(clean[0])[:16]}.mcap": hashy,
        f"{relative}/ep-\\xff.mcap": raw_byte,
        f"{relative}/ep-\\\\xff.mcap": text_escape,
    }
    assert {p: rows[p]["sha256"] for p in expected} == {p: sha256_of(f) for p, f in expected.items()}
    assert all(FileState(rows[p]["state"]) in TERMINAL_FILE_STATES for p in expected)
    assert all(r["version"] == 1 for r in rows.values())
    assert first.steps["ingest"]["succeeded"] == len(manifest.files) + 3
    second = ingest_vendor(vendor, ctx, settle_s=0)
    assert second.steps["ingest"]["skipped"] == len(manifest.files) + 3
    assert len(episode_rows(ctx.engine)) == len(rows)


def test_links_never_bring_in_a_file_from_outside(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    """A file swapped for a symlink to a secret after discovery, and a hard link to it, are refused at
    landing and recorded as passed over; the secret is never stored."""
    from pipeline.steps.ingest import IngestStep
    from pipeline.steps.runner import run_step
    from pipeline.vendor_ingest import discover_vendor

    root, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$salt$hash:19000:0:99999:7:::\n")
    ctx = make_context(tmp_path, migrated_database_url)
    found = discover_vendor(vendor, ctx.settings.project_dir_abs, settle_s=0)
    victim = root / manifest.by_defect(None)[0].path
    victim.unlink()
    victim.symlink_to(secret)  # after discovery, before landing
    linked = root / manifest.by_defect(None)[1].path
    linked.unlink()
    os.link(secret, linked)
    items = [WorkItem(key=c.path, source_path=c.path, size_bytes=c.size_bytes) for c in found.candidates]
    summary = run_step(IngestStep(vendor, ctx), items)
    assert summary.rejected == 2
    assert not ctx.store.has_raw(sha256_of(secret))
    with ctx.engine.connect() as conn:
        passed = dict(conn.execute(sa.text("SELECT path, why FROM passed_over_files")).all())
    assert passed == {
        manifest.by_defect(None)[0].path: "outside_root",
        manifest.by_defect(None)[1].path: "hard_link",
    }
    assert manifest.by_defect(None)[0].path not in episode_rows(ctx.engine)


def test_files_discovery_passes_over_are_recorded(
    tmp_path: Path, migrated_database_url: str, robot_drop: tuple[Path, DropManifest]
) -> None:
    root, vendor, _ = _acme_drop(tmp_path, robot_drop)
    outside = tmp_path / "outside.mcap"
    outside.write_bytes(b"not the vendor's")
    (root / "link-out.mcap").symlink_to(outside)
    os.mkfifo(root / "fifo.mcap")
    ctx = make_context(tmp_path, migrated_database_url)
    report = ingest_vendor(vendor, ctx, settle_s=0, gate=False)
    assert {p["path"]: p["why"] for p in report.passed_over} == {
        "fifo.mcap": "not_regular",
        "link-out.mcap": "outside_root",
    }
    with ctx.engine.connect() as conn:
        recorded = dict(conn.execute(sa.text("SELECT path, why FROM passed_over_files")).all())
    assert recorded == {"fifo.mcap": "not_regular", "link-out.mcap": "outside_root"}
    ingest_vendor(vendor, ctx, settle_s=0, gate=False)  # seen again: refreshed, not duplicated
    with ctx.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM passed_over_files")).scalar_one() == 2


def test_every_catalog_connection_of_an_ingest_is_the_ingest_role(
    tmp_path: Path,
    migrated_database_url: str,
    ingest_role_url: str,
    robot_drop: tuple[Path, DropManifest],
    connection_log: Callable[[str], Callable[[], list[str]]],
) -> None:
    """Built as every entry point builds it (build_context), an ingest and its pre-gate connect as
    sluice_ingest only, and the states they set are history rows of the state function."""
    from pipeline.settings import Settings
    from pipeline.steps.runner import build_context

    _, vendor, manifest = _acme_drop(tmp_path, robot_drop)
    settings = Settings(
        home=tmp_path / "home",
        database_url=migrated_database_url,
        ingest_database_url=ingest_role_url,
        store_url=str(tmp_path / "store"),
        project_dir=tmp_path,
    )
    users = connection_log(sa.make_url(migrated_database_url).database or "")
    ctx = build_context(settings, code_version="test")
    try:
        report = ingest_vendor(vendor, ctx, settle_s=0)
    finally:
        ctx.engine.dispose()
    seen = users()
    assert seen and set(seen) == {"sluice_ingest"}, seen
    assert report.steps["ingest"]["succeeded"] == len(manifest.files)
    engine = sa.create_engine(migrated_database_url)
    with engine.connect() as conn:
        changes = conn.execute(sa.text("SELECT count(*), min(changed_by) FROM episode_state_changes")).one()
        decided = conn.execute(sa.text("SELECT count(*) FROM episodes WHERE state <> 'pending'")).scalar_one()
    engine.dispose()
    assert tuple(changes) == (decided, "sluice_ingest")
