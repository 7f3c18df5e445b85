"""``sluice status`` and ``sluice lineage`` end to end against the real catalog, as the curation reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner
from world import CRC_DETAIL, DATASET, VERSION, World

from pipeline.catalog.roles import RoleUrls
from pipeline.cli import lineage, status

pytestmark = pytest.mark.integration


def _invoke(args: list[str], role_urls: RoleUrls, tmp_path: Path) -> tuple[int, str]:
    app = typer.Typer()
    app.command("status")(status.command)
    app.command("lineage")(lineage.command)
    env = {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": role_urls.reader_url}
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.output


def test_status_json_names_what_needs_attention(world: World, role_urls: RoleUrls, tmp_path: Path) -> None:
    code, out = _invoke(["status", "--json", "--runs", "2"], role_urls, tmp_path)
    assert code == 0, out
    data = json.loads(out)
    assert [r["id"] for r in data["runs"]] == [world.runs["video"], world.runs["robot"]]
    attention = data["attention"]
    assert attention["failed_runs"] == [world.runs["video"]]
    assert attention["runs_with_warnings"] == [world.runs["robot"]]
    assert {(q["reason"], q["files"]) for q in attention["quarantined_by_reason"]} == {
        ("crc_mismatch", 1), ("gap_rate_high", 1), ("blank_video", 1), ("decode_error", 1)
    }  # fmt: skip
    assert {f["step"] for f in attention["failed_steps"]} == {"transcode", "annotate"}
    assert attention["pending_files"] == 1


def test_status_table_and_vendor_filter(world: World, role_urls: RoleUrls, tmp_path: Path) -> None:
    code, out = _invoke(["status", "--vendor", "vidco"], role_urls, tmp_path)
    assert code == 0, out
    assert "latest runs" in out and "needs attention" in out and "blank_video" in out
    assert "crc_mismatch" not in out and f"failed runs: #{world.runs['video']}" in out


def test_lineage_json_and_tree(world: World, role_urls: RoleUrls, tmp_path: Path) -> None:
    code, out = _invoke(["lineage", f"manifest:{DATASET}@{VERSION}:0", "--json"], role_urls, tmp_path)
    assert code == 0, out
    data = json.loads(out)
    assert [n["kind"] for n in data["chain"]] == ["manifest_row", "manifest", "artifact", "episode", "blob"]
    assert data["raw"]["sha256"] == world.blobs["e1"]
    code, out = _invoke(["lineage", f"episode:{world.episodes['e4']}"], role_urls, tmp_path)
    assert code == 0, out
    # piped (as here): every link on lines of its own, nothing cut at a width (a sha256 stays whole)
    assert "reasons=crc_mismatch" in out and f"blob:{world.blobs['e4']}" in out
    assert max(len(line) for line in out.splitlines()) > 80
    assert "rejected" in out and CRC_DETAIL.split()[0] in out


def test_lineage_of_an_unknown_id_is_a_clean_error(world: World, role_urls: RoleUrls, tmp_path: Path) -> None:
    code, _ = _invoke(["lineage", "episode:nope"], role_urls, tmp_path)
    assert code != 0
