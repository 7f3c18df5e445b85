"""Every file of ../shared/corpus/ gets the outcome the corpus README describes, under the profiles it names.

Expected outcomes are derived independently of the code under test: for the conformance files from the
JSON listing beside each file, for the rosbag2 bags from the stock ``mcap`` reader (its raw records: chunk
CRCs, the data-section CRC, log times), for exact copies from their sha256.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from ingest_helpers import ACME, episode_rows, make_context, sha256_of, vendor_config

from pipeline.config import generic_vendor
from pipeline.enums import TERMINAL_FILE_STATES, FileState, ReasonCode
from pipeline.vendor_ingest import ingest_vendor

pytestmark = pytest.mark.integration
R = ReasonCode
STRUCTURAL = {
    R.ZERO_BYTES, R.BAD_MAGIC, R.TRUNCATED, R.CRC_MISMATCH, R.RECORD_TOO_LARGE, R.UNKNOWN_COMPRESSION,
    R.CONTAINER_ERROR, R.DECODE_ERROR,
}  # fmt: skip
#: The encodings a robot profile allow-lists by default (TopicContract's defaults).
ALLOWED_MESSAGE_ENCODINGS = {"cbor", "cdr", "flatbuffer", "json", "msgpack", "protobuf", "ros1"}
ALLOWED_SCHEMA_ENCODINGS = {
    "flatbuffer",
    "jsonschema",
    "none",
    "omgidl",
    "protobuf",
    "ros1msg",
    "ros2idl",
    "ros2msg",
}


class Rows(dict[str, dict[str, Any]]):
    """path -> episode row of one ingest, and the catalog it went into."""

    engine: sa.Engine


def _generic(kind: str, root: Path, name: str, include: list[str]) -> Any:
    base = generic_vendor(kind, str(root), name=name).model_dump(mode="json")
    return vendor_config(base, root, source={"include": include})


def _ingest(
    tmp_path_factory: pytest.TempPathFactory, make_db: Callable[[str], str], vendor_of: Callable[[], Any]
) -> Rows:
    """Ingest with a vendor of its own, in a database of its own (the same bytes under two profiles would
    otherwise be duplicates of each other)."""
    vendor = vendor_of()
    base = tmp_path_factory.mktemp(vendor.name)
    ctx = make_context(base, make_db(vendor.name))
    report = ingest_vendor(vendor, ctx, settle_s=0)
    rows = Rows(episode_rows(ctx.engine, vendor.name))
    rows.engine = ctx.engine
    assert report.discovered == len(rows)
    assert all(FileState(r["state"]) in TERMINAL_FILE_STATES for r in rows.values())
    return rows


def _outcome(row: dict[str, Any]) -> tuple[FileState, frozenset[ReasonCode]]:
    return FileState(row["state"]), frozenset(ReasonCode(r) for r in row["reasons"])


# -- mcap-conformance ----------------------------------------------------------------------------------------


def _listing(corpus: Path, name: str) -> dict[str, Any]:
    """What the upstream JSON says a conformance file holds."""
    records = json.loads((corpus / "mcap-conformance" / name).with_suffix(".json").read_text())["records"]
    fields = [(r["type"], dict(r["fields"])) for r in records]
    schemas = {f["id"]: f["encoding"] for t, f in fields if t == "Schema"}
    channels = {f["id"]: f for t, f in fields if t == "Channel"}
    times: dict[str, list[int]] = {}
    for t, f in fields:
        if t == "Message":
            times.setdefault(channels[f["channel_id"]]["topic"], []).append(int(f["log_time"]))
    backward = any(b < a for ts in times.values() for a, b in itertools.pairwise(ts))
    repeated = any(len(set(ts)) < len(ts) for ts in times.values())
    encodings_ok = all(
        c["message_encoding"] in ALLOWED_MESSAGE_ENCODINGS
        and (schemas.get(c["schema_id"], "none") or "none") in ALLOWED_SCHEMA_ENCODINGS
        for c in channels.values()
    )
    return {
        "messages": sum(len(ts) for ts in times.values()),
        "channels": len(channels),
        "timing_flags": ({R.NON_MONOTONIC_TIME} if backward else set())
        | ({R.DUPLICATE_TIMESTAMPS} if repeated else set()),
        "encodings_ok": encodings_ok,
    }


FAMILIES = ("NoData", "OneAttachment", "OneMessage", "OneMetadata", "OneSchemalessMessage", "TenMessages")
FULLEST = (
    "-st-sum",
    "-ax-st-sum",
    "-ch-chx-mx-rch-rsh-st-sum",
    "-mdx-st-sum",
    "-ch-chx-mx-rch-st-sum",
    "-ch-chx-mx-rch-rsh-st-sum",
)
ROBOT_SAMPLE = [f"{family}.mcap" for family in FAMILIES] + [
    f"{f}{v}.mcap" for f, v in zip(FAMILIES, FULLEST, strict=True)
]


def _flags(codes: set[ReasonCode]) -> tuple[FileState, frozenset[ReasonCode]]:
    return (FileState.ACCEPTED_WITH_FLAGS if codes else FileState.ACCEPTED), frozenset(codes)


@pytest.fixture(scope="module")
def conformance(
    tmp_path_factory: pytest.TempPathFactory, module_database: Callable[[str], str], corpus_dir: Path
) -> dict[str, Rows]:
    root = corpus_dir / "mcap-conformance"
    profiles = {
        # container-only: no topic listed, any encoding
        "container": lambda: _generic("mcap", root, "corpus_container", ["**/*.mcap"]),
        # no topic listed, but the well-known encodings allow-listed (TopicContract's defaults)
        "allowlist": lambda: vendor_config(
            {"name": "corpus_allowlist", "kind": "mcap", "topics": {}},
            root,
            source={"include": ["**/*.mcap"]},
        ),
        # the full robot profile of a real vendor, on the plainest and the fullest variant of each family
        # (every file already went through the same encoding checks above; this adds the contract's)
        "robot": lambda: vendor_config(
            ACME, root, name="corpus_robot", source={"include": ROBOT_SAMPLE}, calibration={}
        ),
    }
    return {name: _ingest(tmp_path_factory, module_database, make) for name, make in profiles.items()}


def test_every_conformance_file_is_ingested(conformance: dict[str, Rows], corpus_dir: Path) -> None:
    files = {p.name for p in (corpus_dir / "mcap-conformance").glob("*.mcap")}
    assert len(files) == 208
    assert set(conformance["container"]) == set(conformance["allowlist"]) == files
    assert set(conformance["robot"]) == set(ROBOT_SAMPLE) <= files


def test_conformance_is_accepted_under_a_container_only_profile(
    conformance: dict[str, Rows], corpus_dir: Path
) -> None:
    wrong = {}
    for name, row in conformance["container"].items():
        expected = _flags(_listing(corpus_dir, name)["timing_flags"])
        if _outcome(row) != expected:
            wrong[name] = (_outcome(row), expected, row["detail"])
    assert wrong == {}
    flagged = [n for n, r in conformance["container"].items() if r["state"] == "accepted_with_flags"]
    assert flagged and all(n.startswith("TenMessages") for n in flagged)
    assert any(
        n.startswith("NoData") and r["state"] == "accepted" for n, r in conformance["container"].items()
    )


def test_conformance_encodings_are_quarantined_where_encodings_are_allow_listed(
    conformance: dict[str, Rows], corpus_dir: Path
) -> None:
    wrong = {}
    for name, row in conformance["allowlist"].items():
        listing = _listing(corpus_dir, name)
        if listing["encodings_ok"]:
            expected = _flags(listing["timing_flags"])
        else:
            expected = (FileState.QUARANTINED, frozenset({R.UNSUPPORTED_ENCODING}))
        if _outcome(row) != expected:
            wrong[name] = (_outcome(row), expected, row["detail"])
    assert wrong == {}
    assert sum(r["state"] == "quarantined" for r in conformance["allowlist"].values()) > 150


def test_conformance_under_a_robot_profile_is_quarantined_for_contract_reasons_never_as_corrupt(
    conformance: dict[str, Rows], corpus_dir: Path
) -> None:
    wrong = {}
    for name, row in conformance["robot"].items():
        listing = _listing(corpus_dir, name)
        # acme requires five topics and an 'episode' metadata record; the files are nanoseconds long
        expected = {R.MISSING_REQUIRED_TOPIC, R.MISSING_METADATA}
        expected |= {R.DURATION_OUT_OF_BOUNDS} if listing["messages"] else {R.NO_MESSAGES}
        expected |= {R.UNSUPPORTED_ENCODING} if listing["channels"] else set()
        if _outcome(row) != (FileState.QUARANTINED, frozenset(expected)):
            wrong[name] = (_outcome(row), expected, row["detail"])
        assert not STRUCTURAL & set(map(ReasonCode, row["reasons"])), name
    assert wrong == {}


# -- rosbag2 -------------------------------------------------------------------------------------------------


def _bag_facts(path: Path) -> dict[str, Any]:
    """What the stock mcap reader says about a bag: CRCs, encodings, timing."""
    from mcap.reader import make_reader
    from mcap.records import Chunk, DataEnd, Message
    from mcap.stream_reader import StreamReader

    with open(path, "rb") as fh:
        records = list(StreamReader(fh, emit_chunks=True).records)
    data_crc = next(r.data_section_crc for r in records if isinstance(r, DataEnd))
    chunks_without_crc = sum(1 for r in records if isinstance(r, Chunk) and r.uncompressed_crc == 0)
    unchunked = sum(1 for r in records if isinstance(r, Message))
    times: dict[str, list[int]] = {}
    mismatched = False
    with open(path, "rb") as fh:
        for schema, channel, message in make_reader(fh).iter_messages(log_time_order=False):
            times.setdefault(channel.topic, []).append(message.log_time)
            mismatched |= (
                schema is not None and schema.encoding == "ros2msg" and channel.message_encoding != "cdr"
            )
    flags = set()
    if data_crc == 0 and (chunks_without_crc or unchunked):
        flags.add(R.CRC_ABSENT)
    if any(b < a for ts in times.values() for a, b in itertools.pairwise(ts)):
        flags.add(R.NON_MONOTONIC_TIME)
    if any(len(set(ts)) < len(ts) for ts in times.values()):
        flags.add(R.DUPLICATE_TIMESTAMPS)
    if any(
        max(sorted(ts)[i + 1] - sorted(ts)[i] for i in range(len(ts) - 1)) > 1e9
        for ts in times.values()
        if len(ts) > 1
    ):
        flags.add(R.CLOCK_JUMP)
    return {"flags": flags, "mismatched_encoding": mismatched, "sha256": sha256_of(path)}


@pytest.fixture(scope="module")
def rosbag2(
    tmp_path_factory: pytest.TempPathFactory, module_database: Callable[[str], str], corpus_dir: Path
) -> dict[str, Rows]:
    root = corpus_dir / "rosbag2"
    ros_robot = {
        "name": "corpus_ros2_robot",
        "kind": "mcap",
        "topics": {
            "state": [{"topic": "/rosout", "rate_hz": 1, "message_encodings": ["cdr"]}],
            "message_encodings": ["cdr"],
        },
    }
    return {
        "container": _ingest(
            tmp_path_factory, module_database, lambda: _generic("mcap", root, "corpus_ros2", ["**/*.mcap"])
        ),
        "robot": _ingest(
            tmp_path_factory,
            module_database,
            lambda: vendor_config(ros_robot, root, source={"include": ["**/*services*.mcap"]}),
        ),
    }


def test_rosbag2_bags_get_the_outcomes_the_readme_describes(
    rosbag2: dict[str, Rows], corpus_dir: Path
) -> None:
    rows = rosbag2["container"]
    facts = {name: _bag_facts(corpus_dir / "rosbag2" / name) for name in rows}
    first_of: dict[str, str] = {}
    for name in sorted(facts):
        first_of.setdefault(facts[name]["sha256"], name)
    wrong = {}
    for name, row in rows.items():
        original = first_of[facts[name]["sha256"]]
        if original != name:
            expected: tuple[FileState, frozenset[ReasonCode]] = (FileState.DUPLICATE, frozenset())
            if row["duplicate_of"] != original:
                wrong[name] = ("duplicate of", row["duplicate_of"], original)
        elif facts[name]["mismatched_encoding"]:
            expected = (FileState.QUARANTINED, frozenset({R.UNSUPPORTED_ENCODING}))
        else:
            expected = _flags(facts[name]["flags"])
        if _outcome(row) != expected:
            wrong[name] = (_outcome(row), expected, row["detail"])
    assert wrong == {}
    # the README's named cases, spelled out
    wrong_rmw = next(r for n, r in rows.items() if "wrong_rmw" in n)
    assert (wrong_rmw["state"], wrong_rmw["reasons"]) == ("quarantined", ["unsupported_encoding"])
    assert "wrong_format" in wrong_rmw["detail"]
    copies = {n: r for n, r in rows.items() if "rewriter_" in n}
    for letter in "ab":  # two names for each of two recordings: one original, one duplicate of it
        pair = [n for n in copies if f"rewriter_{letter}_" in n]
        assert len(pair) == 2 and sum(copies[n]["state"] == "duplicate" for n in pair) == 1
    split = sorted(n for n in rows if "multiple_files_multiple_files" in n)
    assert [rows[n]["state"] for n in split] == ["accepted"] * 3


def test_a_split_recording_is_three_valid_consecutive_files(rosbag2: dict[str, Rows]) -> None:
    rows = rosbag2["container"]
    split = sorted(n for n in rows if "multiple_files_multiple_files" in n)
    with rows.engine.connect() as conn:
        spans = conn.execute(
            sa.text(
                "SELECT f.path, e.start_time_ns, e.end_time_ns, array_agg(s.topic) AS topics FROM episodes e "
                "JOIN source_files f ON f.id = e.source_file_id JOIN streams s ON s.episode_id = e.id "
                "WHERE f.path = ANY(:paths) GROUP BY f.path, e.start_time_ns, e.end_time_ns ORDER BY f.path"
            ),
            {"paths": split},
        ).all()
    assert [s.topics for s in spans] == [["/chatter"]] * 3
    assert all(a.end_time_ns < b.start_time_ns for a, b in itertools.pairwise(spans))


def test_a_bag_of_service_events_lacks_the_required_topics(rosbag2: dict[str, Rows]) -> None:
    rows = rosbag2["robot"]
    only_services = next(r for n, r in rows.items() if "only_services" in n)
    assert only_services["state"] == "quarantined"
    assert "missing_required_topic" in only_services["reasons"]
    assert "missing required topic(s) /rosout" in only_services["detail"]
    with_topics = next(r for n, r in rows.items() if "cpp_bags_topics_and_services" in n)
    assert "missing_required_topic" not in with_topics["reasons"]


# -- video ---------------------------------------------------------------------------------------------------

PLAYABLE = ("sample_simple.mp4", "sample_video_only.mp4", "sample_without_stss.mp4")
BROKEN = {
    "sample_with_invalid_nalu.mp4": R.DECODE_ERROR,
    "invalid-bitstream.webm": R.DECODE_ERROR,
    "sample_malformed_free_box.mp4": R.CONTAINER_ERROR,
}
ROTATED = ("sample_rotate_and_reflect.mp4", "internal_emulator_transformer_output_180_rotated.mp4")
NO_VIDEO = ("sample_audio_only.mp4", "large_stbl_truncated_after_moov.m4b")


@pytest.fixture(scope="module")
def videos(
    tmp_path_factory: pytest.TempPathFactory, module_database: Callable[[str], str], corpus_dir: Path
) -> Rows:
    root = corpus_dir / "video"
    return _ingest(
        tmp_path_factory,
        module_database,
        lambda: _generic("video", root, "corpus_video", ["**/*.mp4", "**/*.webm", "**/*.m4b"]),
    )


def test_corpus_videos_get_the_outcomes_the_readme_describes(videos: Rows, corpus_dir: Path) -> None:
    assert set(videos) == {p.name for p in (corpus_dir / "video").iterdir()}
    for name in PLAYABLE:
        assert _outcome(videos[name]) == (FileState.ACCEPTED, frozenset()), name
    for name, code in BROKEN.items():
        assert videos[name]["state"] == "quarantined" and code.value in videos[name]["reasons"], name
    for name in ROTATED:
        assert _outcome(videos[name]) == (FileState.ACCEPTED_WITH_FLAGS, frozenset({R.ROTATED})), name
    for name in NO_VIDEO:
        assert _outcome(videos[name]) == (FileState.QUARANTINED, frozenset({R.NO_VIDEO_STREAM})), name
    assert _outcome(videos["silent-black-10s.mp4"]) == (FileState.QUARANTINED, frozenset({R.BLANK_VIDEO}))
    edit_list = videos["sample_edit_list_no_sync_frame_before_edit.mp4"]
    state, reasons = _outcome(edit_list)
    if state is FileState.QUARANTINED:
        assert R.TOO_FEW_FRAMES in reasons
    else:
        assert state is FileState.ACCEPTED_WITH_FLAGS and R.MISSING_LEADING_KEYFRAME in reasons


def test_the_decoder_version_is_stored_with_every_video_probe(videos: Rows) -> None:
    import av

    with videos.engine.connect() as conn:
        probes = dict(
            conn.execute(
                sa.text(
                    "SELECT f.path, c.observed FROM check_results c JOIN episodes e ON e.id = c.episode_id "
                    "JOIN source_files f ON f.id = e.source_file_id WHERE c.check_name = 'probe'"
                )
            ).all()
        )
    assert set(probes) == set(videos)
    running = ".".join(str(v) for v in av.library_versions["libavcodec"])
    for name, probe in probes.items():
        assert probe["decoder"]["libavcodec"] == running and probe["decoder"]["ffmpeg"], name
    # malformed by the MP4 spec: what it becomes depends on the decoder, which is recorded beside it
    missing_stsd = videos["sample_missing_stsd.mp4"]
    assert FileState(missing_stsd["state"]) in TERMINAL_FILE_STATES
    assert probes["sample_missing_stsd.mp4"]["decoded_frames"] >= 0
