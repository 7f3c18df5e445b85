"""The catalogue of bad inputs: every file ends in exactly the expected state and reason codes, none is
lost, the raw bytes and the vendor's files never change."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from ingest_catalogue import ODD_NAMES, ROBOT_CASES, VIDEO_CASES, VIDEO_CONTRACT, VIDEO_QUALITY
from ingest_helpers import (
    ACME,
    REPO,
    Expected,
    blobs,
    copy_drop,
    episode_rows,
    make_context,
    snapshot,
    vendor_config,
)

from pipeline.enums import TERMINAL_FILE_STATES, FileState, ReasonCode
from pipeline.steps.ingest import catalog_path
from pipeline.synth import VideoDefect, VideoDropConfig, expected_outcome, make_video_drop
from pipeline.synth.defects import TRANSCODE_DEFECTS
from pipeline.synth.drop import DropManifest
from pipeline.vendor_ingest import IngestReport, ingest_vendor

pytestmark = pytest.mark.integration

VIDEO_DROP = VideoDropConfig(
    clips=2, seconds=1.2, width=128, height=96, scene_cuts=1, sidecars=False, defects=tuple(VideoDefect)
)


class Run:
    """One ingest of the robot catalogue and one of the video catalogue into one database."""

    def __init__(self, base: Path, url: str) -> None:
        self.base = base
        self.ctx = make_context(base, url)
        self.expected: dict[str, Expected] = {}
        self.roots: dict[str, Path] = {}
        self.before: dict[str, dict[str, tuple[str, int]]] = {}
        self.reports: dict[str, IngestReport] = {}
        self.defects: dict[str, str | None] = {}  # synthetic files: path -> the defect they carry

    def rows(self) -> dict[str, dict[str, Any]]:
        return episode_rows(self.ctx.engine)


def _expected_from_manifest(manifest: DropManifest) -> dict[str, Expected]:
    out = {}
    for f in manifest.files:
        # what ingest gives it: a defect only the transcode finds is a clean file until then
        state, reasons = expected_outcome(None if f.defect in TRANSCODE_DEFECTS else f.defect)
        out[f.path] = Expected.of(state, *reasons, duplicate_of=f.duplicate_of)
    return out


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
    module_database: Callable[[str], str],
    robot_drop: tuple[Path, DropManifest],
) -> Run:
    base = tmp_path_factory.mktemp("catalogue")
    result = Run(base, module_database("catalogue"))

    template, manifest = robot_drop
    robot_root = copy_drop(template, base / "acme")
    clean = robot_root / manifest.by_defect(None)[0].path
    result.expected.update(_expected_from_manifest(manifest))
    result.defects.update({f.path: f.defect for f in manifest.files})
    for rel, (make, expected) in ROBOT_CASES.items():
        make(clean, robot_root / rel)
        result.expected[catalog_path(rel)] = expected
    robot = vendor_config(
        ACME,
        robot_root,
        episode_metadata={"path_pattern": r"^zz/from_path/(?P<robot_id>[^/]+)/(?P<session_id>[^/]+)/"},
    )

    video_root = base / "northwind"
    video_manifest = make_video_drop(video_root, VIDEO_DROP)
    result.expected.update(_expected_from_manifest(video_manifest))
    result.defects.update({f.path: f.defect for f in video_manifest.files})
    for rel, (make, expected) in VIDEO_CASES.items():
        make(video_root / rel)
        result.expected[rel] = expected
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.mp4").write_bytes(b"not for the vendor")
    # A symlink out of the vendor root is never followed: discovery passes over it, with the reason.
    os.symlink(outside / "secret.mp4", video_root / "crafted" / "link_outside.mp4")
    video = vendor_config(
        REPO / "dags" / "vendors" / "northwind_video.yaml",
        video_root,
        video=VIDEO_CONTRACT,
        quality=VIDEO_QUALITY,
        source={"ready_marker": None},
    )

    result.roots = {"acme_robotics": robot_root, "northwind_video": video_root}
    for name, root in result.roots.items():
        result.before[name] = snapshot(root)
    for vendor in (robot, video):
        result.reports[vendor.name] = ingest_vendor(vendor, result.ctx, settle_s=0)
    return result


def test_the_catalogue_is_big_enough(run: Run) -> None:
    bad = [p for p, e in run.expected.items() if e.state is not FileState.ACCEPTED]
    assert len(bad) >= 40, len(bad)
    assert {e.state for e in run.expected.values()} == set(TERMINAL_FILE_STATES)


def _case_ids() -> list[str]:
    from pipeline.synth import RobotDefect
    from pipeline.synth.defects import defect_applies

    synth = [f"synth-robot-{d.value}" for d in RobotDefect if defect_applies(d, "default")] + [
        f"synth-video-{d.value}" for d in VideoDefect
    ]
    return [*synth, *ROBOT_CASES, *VIDEO_CASES]


def _lookup(run: Run, case: str) -> list[str]:
    """The catalog paths a case id stands for."""
    if case.startswith("synth-"):
        _, kind, defect = case.split("-", 2)
        return [
            p
            for p in run.expected
            if run.defects.get(p) == defect and (p.endswith(".mcap") == (kind == "robot"))
        ]
    return [catalog_path(case)]


@pytest.mark.parametrize("case", _case_ids(), ids=lambda c: c.encode("unicode_escape").decode())
def test_each_input_ends_in_its_expected_state(run: Run, case: str) -> None:
    rows = run.rows()
    paths = _lookup(run, case)
    assert paths, case
    for path in paths:
        expected = run.expected[path]
        row = rows[path]
        got = (FileState(row["state"]), frozenset(ReasonCode(r) for r in row["reasons"]))
        assert got == (expected.state, expected.reasons), f"{path!r}: {row['detail']}"
        if expected.state is FileState.QUARANTINED:
            assert row["detail"], path  # a human-readable why
        if expected.duplicate_of is not None:
            assert row["duplicate_of"] == expected.duplicate_of


def test_clean_inputs_are_accepted(run: Run) -> None:
    rows = run.rows()
    clean = [p for p, e in run.expected.items() if e == Expected.of(FileState.ACCEPTED)]
    assert len(clean) >= 4 + len(ODD_NAMES)
    assert {p: rows[p]["state"] for p in clean} == {p: "accepted" for p in clean}


def test_every_input_has_exactly_one_terminal_row(run: Run) -> None:
    rows = run.rows()
    assert set(rows) == set(run.expected)  # none lost, none invented
    assert all(FileState(r["state"]) in TERMINAL_FILE_STATES for r in rows.values())
    with run.ctx.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM episodes")).scalar_one() == len(run.expected)
    discovered = sum(r.discovered for r in run.reports.values())
    assert discovered == len(run.expected)


def test_a_symlink_out_of_the_root_is_reported_not_followed(run: Run) -> None:
    over = run.reports["northwind_video"].passed_over
    assert [(o["path"], o["why"]) for o in over] == [("crafted/link_outside.mp4", "outside_root")]
    assert "crafted/link_outside.mp4" not in run.rows()


def test_ids_missing_from_the_log_come_from_the_path_when_the_vendor_says_how(run: Run) -> None:
    with run.ctx.engine.connect() as conn:
        ids = {
            path: (robot, session)
            for path, robot, session in conn.execute(
                sa.text(
                    "SELECT sf.path, e.robot_id, e.session_id FROM episodes e "
                    "JOIN source_files sf ON sf.id = e.source_file_id WHERE sf.path LIKE 'zz/%'"
                )
            )
        }
    assert ids["zz/from_path/rb77/s9/no_record.mcap"] == ("rb77", "s9")
    assert (
        ids["zz/content/no_calibration.mcap"][0] == "rb77"
    )  # the log's own record, the pattern not matching
    assert ids["zz/content/missing_metadata.mcap"] == (None, None)
    detail = run.rows()["zz/content/missing_metadata.mcap"]["detail"]
    assert "no robot_id in the log's 'episode' metadata record or its path" in detail


def test_the_missing_topic_is_named(run: Run) -> None:
    row = next(r for p, r in run.rows().items() if run.defects.get(p) == "missing_topic")
    assert "missing required topic(s) /robot/action" in row["detail"]


def test_a_clock_jump_is_not_also_a_gap(run: Run) -> None:
    jumped = next(p for p in run.expected if run.defects.get(p) == "clock_jump")
    with run.ctx.engine.connect() as conn:
        gaps = conn.execute(
            sa.text(
                "SELECT s.topic, s.gap_rate FROM streams s JOIN episodes e ON e.id = s.episode_id "
                "JOIN source_files f ON f.id = e.source_file_id WHERE f.path = :p AND s.gap_rate IS NOT NULL"
            ),
            {"p": jumped},
        ).all()
    assert gaps and max(g for _, g in gaps) < 0.02, gaps  # the stored gap rates leave the jump out


def test_every_check_result_is_stored(run: Run) -> None:
    with run.ctx.engine.connect() as conn:
        checks = conn.execute(
            sa.text(
                "SELECT f.path, array_agg(c.check_name) AS names, array_agg(c.reason) AS reasons "
                "FROM check_results c JOIN episodes e ON e.id = c.episode_id "
                "JOIN source_files f ON f.id = e.source_file_id GROUP BY f.path"
            )
        ).all()
    by_path = {r.path: r for r in checks}
    for path, row in run.rows().items():
        if row["state"] == FileState.DUPLICATE.value:
            assert path not in by_path  # an exact copy is not probed again
            continue
        assert "probe" in by_path[path].names, path
        assert set(row["reasons"]) <= {r for r in by_path[path].reasons if r}, path


def test_raw_objects_and_vendor_files_are_unchanged(run: Run) -> None:
    assert list(run.ctx.store.scrub(blobs(run.ctx.engine))) == []
    for name, root in run.roots.items():
        assert snapshot(root) == run.before[name], name
    raw = run.ctx.store.local_raw_path("0" * 64).parent
    assert {p.name for p in raw.iterdir()} == {sha for sha, _ in blobs(run.ctx.engine)}
    assert all((p.stat().st_mode & 0o222) == 0 for p in raw.iterdir())
