"""Near-duplicate groups in dataset builds: one episode per group by default, and the report of who kept whom."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy.engine import Engine
from synthetic_catalog import SyntheticCatalog
from typer.testing import CliRunner

from pipeline.catalog import repo
from pipeline.cli import dataset
from pipeline.datasets import DatasetSpec, DatasetVersion
from pipeline.dedup import run_dedup
from pipeline.dedup.catalog import MESSAGE_KEY
from pipeline.warehouse import run_query

pytestmark = pytest.mark.integration

Build = Callable[[DatasetSpec], DatasetVersion]


def _spec(name: str = "dedup_demo", **overrides: object) -> DatasetSpec:
    data: dict[str, object] = {
        "name": name,
        "filter": {"where": "is_accepted"},
        "splits": {"group_by": ["session_id"], "seed": 3, "val_fraction": 0.0, "eval_fraction": 0.0},
    }
    data.update(overrides)
    return DatasetSpec.model_validate(data)


def _manifest(version: DatasetVersion) -> pa.Table:
    assert version.manifest_uri is not None
    path = Path(version.manifest_uri.removeprefix("file://"))
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


def _ids(version: DatasetVersion) -> list[int]:
    return sorted(int(e) for e in _manifest(version)["episode_id"].to_pylist())


def _eval_ids(version: DatasetVersion) -> set[int]:
    table = _manifest(version)
    pairs = zip(table["episode_id"].to_pylist(), table["split"].to_pylist(), strict=True)
    return {int(e) for e, split in pairs if split == "eval"}


def _fingerprint(catalog: SyntheticCatalog, digests: dict[int, str]) -> None:
    """Record a message fingerprint per episode, as the fingerprint annotator would."""
    with catalog.session() as s:
        for episode_id, digest in digests.items():
            repo.record_annotation(
                s, episode_id=episode_id, annotator="message_fingerprint", annotator_version="1",
                key=MESSAGE_KEY, value=digest,
            )  # fmt: skip


@pytest.fixture
def trio(catalog: SyntheticCatalog, catalog_engine: Engine) -> tuple[list[int], list[int]]:
    """Three near-duplicates across two vendors (the middle one the representative) and two loners."""
    with catalog.session() as s:
        dups = [
            catalog.episode(s, vendor=v, session_id=f"d{i}") for i, v in enumerate(["acme", "bf", "acme"])
        ]
        loners = [catalog.episode(s, session_id=f"l{i}") for i in range(2)]
    _fingerprint(catalog, {**dict.fromkeys(dups, "same-messages"), loners[0]: "a", loners[1]: "b"})
    _, kept = run_dedup(catalog_engine, scores={dups[1]: 0.9, dups[0]: 0.2, dups[2]: 0.5})
    assert list(kept.values()) == [dups[1]]
    return dups, loners


def test_one_episode_per_group_by_default_all_with_keep_all(
    trio: tuple[list[int], list[int]], build_now: Build, warehouse_path: Path
) -> None:
    dups, loners = trio
    first = build_now(_spec())
    assert _ids(first) == sorted([dups[1], *loners])
    assert first.counts["near_duplicates_dropped"] == 2
    assert first.near_duplicates == [{"group": f"g{dups[0]}", "kept": dups[1], "dropped": [dups[0], dups[2]]}]

    # the view exposes the grouping the build used
    rows = run_query(
        warehouse_path,
        "SELECT episode_id, dedup_group, dedup_group_size, representative FROM episode_view ORDER BY 1",
    )
    assert [tuple(r.values()) for r in rows.table.to_pylist()] == [
        *((d, f"g{dups[0]}", 3, dups[1]) for d in dups),
        *((e, f"g{e}", 1, e) for e in loners),
    ]

    everything = build_now(_spec(name="dedup_all", near_duplicates="keep_all"))
    assert _ids(everything) == sorted([*dups, *loners])
    assert everything.near_duplicates == [] and everything.counts["near_duplicates_dropped"] == 0

    # rebuilt: the same version, the same bytes, the same report as recorded
    again = build_now(_spec())
    assert not again.created and again.ref == first.ref
    assert again.manifest_sha256 == first.manifest_sha256
    assert again.near_duplicates == first.near_duplicates
    fresh = build_now(_spec(name="dedup_copy"))
    assert fresh.created and fresh.manifest_sha256 == first.manifest_sha256


def test_representative_filtered_out_keeps_lowest_matching_id(
    trio: tuple[list[int], list[int]], build_now: Build
) -> None:
    dups, loners = trio
    spec = _spec(filter={"where": "is_accepted AND episode_id <> $skip", "params": {"skip": dups[1]}})
    version = build_now(spec)
    assert _ids(version) == sorted([dups[0], *loners])
    assert version.near_duplicates == [{"group": f"g{dups[0]}", "kept": dups[0], "dropped": [dups[2]]}]


def test_frozen_evaluation_episode_is_never_dropped_for_its_representative(
    catalog: SyntheticCatalog, catalog_engine: Engine, build_now: Build
) -> None:
    with catalog.session() as s:
        episodes = [catalog.episode(s, session_id=f"s{i}") for i in range(12)]
    splits = {"group_by": ["session_id"], "seed": 5, "val_fraction": 0.0, "eval_fraction": 0.3}
    first = build_now(_spec(splits=splits))
    assert first.split_episodes["eval"] > 0
    # an eval episode gets a near-duplicate that the grouping prefers: the new one would be kept by default
    manifest_eval = _eval_ids(first)
    frozen = min(manifest_eval)
    with catalog.session() as s:
        twin = catalog.episode(s, session_id="twin")
    _fingerprint(catalog, {frozen: "twins", twin: "twins"})
    _, kept = run_dedup(catalog_engine, scores={twin: 1.0, frozen: 0.0})
    assert kept == {f"g{frozen}": twin}

    second = build_now(_spec(splits=splits))
    assert _eval_ids(second) == manifest_eval
    assert twin not in _ids(second)
    assert second.near_duplicates == [{"group": f"g{frozen}", "kept": frozen, "dropped": [twin]}]
    # same rows, but the record of what was dropped changed: a new version with the same manifest bytes
    assert second.created and second.ref.endswith("@v2") and second.manifest_sha256 == first.manifest_sha256
    assert set(_ids(second)) == set(episodes)


def test_show_names_the_kept_and_dropped_episodes(
    trio: tuple[list[int], list[int]], migrated_database_url: str, tmp_path: Path
) -> None:
    dups, _ = trio
    spec_path = tmp_path / "shown.yaml"
    spec_path.write_text("name: shown\nsplits: {val_fraction: 0.0, eval_fraction: 0.0}\n")
    env = {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}
    runner = CliRunner()
    built = runner.invoke(dataset.app, ["build", str(spec_path), "--json"], env=env, catch_exceptions=False)
    assert built.exit_code == 0, built.output
    shown = runner.invoke(dataset.app, ["show", "shown@v1", "--json"], env=env, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["near_duplicates"] == [
        {"group": f"g{dups[0]}", "kept": dups[1], "dropped": [dups[0], dups[2]]}
    ]
    assert data["spec"]["near_duplicates"] == "keep_one" and "_near_duplicates" not in data["spec"]


def test_view_takes_all_three_keys_from_the_latest_dedup_run(
    catalog: SyntheticCatalog, build_now: Build, warehouse_path: Path
) -> None:
    with catalog.session() as s:
        a, b = (catalog.episode(s, session_id=f"v{i}") for i in range(2))
    runs = [
        ("old", {a: ("ga", 2, b), b: ("ga", 2, b)}),  # grouped under old thresholds ...
        ("new", {a: (f"g{a}", 1, a)}),  # ... apart under new ones (b not re-run: its old row stands)
    ]
    for version, values in runs:
        with catalog.session() as s:
            for episode_id, (group, size, kept) in values.items():
                for key, value in (("group", group), ("group_size", size), ("representative", kept)):
                    repo.record_annotation(
                        s, episode_id=episode_id, annotator="dedup", annotator_version=version,
                        key=f"dedup.{key}", value=value,
                    )  # fmt: skip
    build_now(_spec())  # syncs the warehouse
    rows = run_query(
        warehouse_path,
        "SELECT episode_id, dedup_version, dedup_group, dedup_group_size, representative "
        "FROM episode_view ORDER BY 1",
    )
    assert [tuple(r.values()) for r in rows.table.to_pylist()] == [
        (a, "new", f"g{a}", 1, a),
        (b, "old", "ga", 2, b),
    ]
