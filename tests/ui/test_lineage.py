"""Lineage from any id back to the raw file, against the real catalog and a real manifest file."""

from __future__ import annotations

import pytest
from world import CODE_VERSION, DATASET, ROBOT, TRANSCODE_CONFIG, VERSION, World

from pipeline.ui.lineage import LineageNotFoundError, LineageRefError, parse_ref, read_manifest_row, trace
from pipeline.ui.pages import ViewSources

pytestmark = pytest.mark.integration

SHA = "ab" * 32


@pytest.mark.parametrize(
    ("ref", "kind", "value"),
    [
        (SHA, "blob", SHA),
        (f"blob:{SHA}", "blob", SHA),
        ("file:acme/drop/a b.mcap", "file", "acme/drop/a b.mcap"),
        ("episode:12", "episode", "12"),
        ("artifact:7", "artifact", "7"),
        ("artifact:file:///store/derived/x.mcap", "artifact", "file:///store/derived/x.mcap"),
        ("shard:3", "shard", "3"),
        ("shard:pick@v2:train:4", "shard", "pick@v2:train:4"),
        ("manifest:pick@v2", "manifest", "pick@v2"),
        (" manifest:pick@v2:10 ", "manifest", "pick@v2:10"),
    ],
)
def test_parse_ref_reads_every_documented_form(ref: str, kind: str, value: str) -> None:
    parsed = parse_ref(ref)
    assert (parsed.kind, parsed.value) == (kind, value)


@pytest.mark.parametrize(
    "ref",
    ["", "episode", "episode:x", "blob:1234", "run:3", "file:nopath", "shard:pick@v2:train", "manifest:pick:3",
     "manifest:pick@v2:first"],
)  # fmt: skip
def test_parse_ref_refuses_with_the_allowed_forms(ref: str) -> None:
    with pytest.raises(LineageRefError, match=r"allowed forms: blob:<sha256>"):
        parse_ref(ref)


def test_manifest_row_back_to_raw_file_with_steps_config_and_code(sources: ViewSources, world: World) -> None:
    row = world.manifest_rows.index("e3")
    with sources.session() as session:
        lineage = trace(session, f"manifest:{DATASET}@{VERSION}:{row}")
    assert [n.kind for n in lineage.chain] == ["manifest_row", "manifest", "artifact", "episode", "blob"]
    row_node, manifest, transcoded, episode, blob = lineage.chain
    assert row_node.fields["row"] == row and row_node.fields["split"] == "val"
    assert row_node.fields["source_sha256"] == world.blobs["e3"] == blob.fields["sha256"]
    assert manifest.fields["uri"] == world.manifest_uri and manifest.fields["code_version"] == CODE_VERSION
    assert transcoded.ref == f"artifact:{world.transcoded['e3']}"
    assert (transcoded.fields["config_hash"], transcoded.fields["code_version"]) == (
        TRANSCODE_CONFIG,
        CODE_VERSION,
    )
    assert episode.ref == f"episode:{world.episodes['e3']}"
    assert [(s.step, s.status, s.config_hash) for s in lineage.steps] == [
        ("ingest", "succeeded", "ingest-cfg"),
        ("quality_pre", "succeeded", "quality_pre-cfg"),
        ("transcode", "succeeded", "transcode-cfg"),
        ("annotate", "failed", "annotate-cfg"),
    ]
    assert {s.run_id for s in lineage.steps} == {"manual__2025-06-05T10:00:00+00:00"}
    assert lineage.datasets == [{"dataset": f"{DATASET}@{VERSION}", "split": "val"}]
    assert lineage.raw is not None and [a["path"] for a in lineage.raw["aliases"]] == [world.paths["e3"]]
    assert lineage.notes == []


def test_manifest_row_read_touches_the_right_row(world: World) -> None:
    for index, name in enumerate(world.manifest_rows):
        assert read_manifest_row(world.manifest_uri, index)["episode_id"] == str(world.episodes[name])


def test_whole_manifest_lists_its_inputs(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        lineage = trace(session, f"manifest:{DATASET}@{VERSION}")
    assert [n.kind for n in lineage.chain] == ["manifest"]
    made_from = {n.ref for n in lineage.inputs}
    assert {f"artifact:{world.transcoded[n]}" for n in world.manifest_rows} <= made_from
    assert {f"blob:{world.blobs[n]}" for n in world.manifest_rows} <= made_from


def test_shard_by_id_and_by_position(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        by_id = trace(session, f"shard:{world.shard_id}")
        by_position = trace(session, f"shard:{DATASET}@{VERSION}:train:0")
    assert [n.kind for n in by_id.chain] == ["shard", "artifact"]
    assert by_id.chain[0].fields["split"] == "train" and by_id.chain[1].fields["kind"] == "shard"
    assert {n.ref for n in by_id.inputs} == {f"artifact:{world.transcoded[n]}" for n in ("e1", "e2")}
    assert [n.ref for n in by_position.chain] == [n.ref for n in by_id.chain]


def test_artifact_walks_up_single_inputs_to_the_raw_file(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        by_id = trace(session, f"artifact:{world.annotation_artifact}")
        uri = by_id.chain[0].fields["uri"]
        by_uri = trace(session, f"artifact:{uri}")
    assert [n.kind for n in by_id.chain] == ["artifact", "artifact", "episode", "blob"]
    assert by_id.chain[1].ref == f"artifact:{world.transcoded['e1']}"
    assert by_id.chain[-1].fields["sha256"] == world.blobs["e1"]
    assert [n.ref for n in by_uri.chain] == [n.ref for n in by_id.chain]
    assert {a["kind"] for a in by_id.artifacts} == {"transcoded_episode", "annotation"}


def test_raw_file_shows_every_alias_and_what_was_made_from_it(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        lineage = trace(session, world.blobs["e1"])  # e6 delivered the same bytes under another name
        by_path = trace(session, f"file:{ROBOT}/{world.paths['e6']}")
    assert lineage.raw is not None
    aliases = {(a["path"], a["state"]) for a in lineage.raw["aliases"]}
    assert aliases == {(world.paths["e1"], "accepted"), (world.paths["e6"], "duplicate")}
    assert [n.ref for n in lineage.outputs] == [f"artifact:{world.transcoded['e1']}"]
    assert by_path.episode is not None and by_path.episode["state"] == "duplicate"
    assert by_path.episode["duplicate_of_id"] == world.episodes["e1"]


@pytest.mark.parametrize(
    ("ref", "match"),
    [
        ("episode:999999", "episode:999999"),
        ("blob:" + "0" * 64, "is not in the catalog"),
        ("file:acme_robotics/nope.mcap", "no file"),
        ("artifact:file:///nowhere", "is not in the catalog"),
        ("manifest:pick_place@v9:0", "no dataset version pick_place@v9"),
        ("manifest:pick_place@v1:4", "has 4 rows"),
        ("shard:pick_place@v1:val:0", "is not in the catalog"),
    ],
)
def test_unknown_ids_say_what_is_missing(sources: ViewSources, world: World, ref: str, match: str) -> None:
    with sources.session() as session, pytest.raises(LineageNotFoundError, match=match):
        trace(session, ref)
