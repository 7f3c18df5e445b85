"""What makes a file a duplicate: the same bytes as an earlier file of its own vendor (whatever that one's
verdict), or as another vendor's file already accepted; never bytes another vendor's contract quarantined
or an ad-hoc ingest (an exploration) holds. Each ad-hoc folder is its own vendor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ingest_helpers import episode_rows, make_context

from pipeline.config.models import AD_HOC_PREFIX, generic_vendor
from pipeline.synth import RobotDropConfig, make_robot_drop
from pipeline.vendor_ingest import ingest_vendor

pytestmark = pytest.mark.integration


def _states(ctx, vendor: str) -> dict[str, tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    return {p: (r["state"], r["duplicate_of"]) for p, r in episode_rows(ctx.engine, vendor).items()}


def test_duplicates_are_claimed_by_own_and_accepted_files_never_by_ad_hoc_or_quarantined_ones(
    tmp_path: Path, migrated_database_url: str
) -> None:
    drop = tmp_path / "drop"
    manifest = make_robot_drop(
        drop, RobotDropConfig(episodes=1, seconds=1, width=64, height=48, defects=("crc_flipped",))
    )
    clean = next(f.path for f in manifest.files if f.defect is None)
    broken = next(f.path for f in manifest.files if f.defect == "crc_flipped")
    ctx = make_context(tmp_path, migrated_database_url)
    try:
        # an ad-hoc look first, as the quickstart goes: a vendor of its own, named after the folder
        adhoc = generic_vendor("mcap", str(drop))
        assert adhoc.name.startswith(f"{AD_HOC_PREFIX}drop_")
        ingest_vendor(adhoc, ctx, settle_s=0)
        assert _states(ctx, adhoc.name) == {clean: ("accepted", None), broken: ("quarantined", None)}
        # the configured vendor of the same folder is judged on its own: nothing is a duplicate of ad hoc
        first = generic_vendor("mcap", str(drop), name="first_vendor")
        ingest_vendor(first, ctx, settle_s=0)
        assert _states(ctx, "first_vendor") == {clean: ("accepted", None), broken: ("quarantined", None)}
        # another vendor delivering the same bytes: the accepted file is a duplicate of first_vendor's (not
        # of the ad-hoc one), the quarantined bytes are judged under its own contract
        second = tmp_path / "second"
        shutil.copytree(drop, second)
        (second / clean).rename(second / "renamed.mcap")
        other = generic_vendor("mcap", str(second), name="second_vendor")
        ingest_vendor(other, ctx, settle_s=0)
        assert _states(ctx, "second_vendor") == {
            "renamed.mcap": ("duplicate", clean),
            broken: ("quarantined", None),
        }
        with ctx.engine.connect() as conn:
            ((original_vendor,),) = conn.exec_driver_sql(
                "SELECT v.name FROM episodes e JOIN episodes o ON o.id = e.duplicate_of_id "
                "JOIN vendors v ON v.id = o.vendor_id JOIN source_files f ON f.id = e.source_file_id "
                "WHERE f.path = 'renamed.mcap'"
            ).all()
        assert original_vendor == "first_vendor"
        # another ad-hoc folder with the same relative paths is another vendor, not new versions of these
        elsewhere = generic_vendor("mcap", str(second))
        assert elsewhere.name != adhoc.name
        ingest_vendor(elsewhere, ctx, settle_s=0)
        assert {r["version"] for r in episode_rows(ctx.engine, adhoc.name).values()} == {1}
        # ad hoc after a configured vendor: its copies are duplicates of the accepted file
        assert _states(ctx, elsewhere.name)["renamed.mcap"] == ("duplicate", clean)
    finally:
        ctx.engine.dispose()
