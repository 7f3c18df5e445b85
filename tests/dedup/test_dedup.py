"""Near-duplicate grouping: re-encoded and re-chunked copies group with their original, across vendors."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer
from sluice_world import batch_items, land, make_world, vendor_from_example
from sqlalchemy import select

from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import Annotation
from pipeline.dedup import (
    DedupParams,
    Fingerprint,
    Group,
    find_groups,
    group_near_duplicates,
    pick_representatives,
    run_dedup,
    video_match,
)
from pipeline.dedup.grouping import video_pairs
from pipeline.dedup.search import HashIndex
from pipeline.steps.annotate import AnnotateStep
from pipeline.steps.runner import run_step
from pipeline.synth import RobotDropConfig, VideoDropConfig, make_robot_drop, make_video_drop


def test_union_find_joins_chains_and_reps_prefer_scores() -> None:
    a, b, c = 0x0F0F_0F0F_0F0F_0F0F, 0xFFFF_0000_FFFF_0000, 0x1234_5678_9ABC_DEF0
    prints = [
        Fingerprint(1, phashes=(a, b)),
        Fingerprint(2, phashes=(a ^ 0b111, b ^ 0b1)),  # 1 ~ 2 by video
        Fingerprint(3, message_digest="m"),
        Fingerprint(4, phashes=(c, ~c & (2**64 - 1)), message_digest="m"),  # 3 ~ 4 by messages
        Fingerprint(5, phashes=(c ^ 1, ~c & (2**64 - 1))),  # 4 ~ 5 by video: 3, 4, 5 are one group
        Fingerprint(6, phashes=(b, a)),  # the same frames as 1, in another order
        Fingerprint(7, phashes=(a ^ (2**40 - 1), b ^ (2**40 - 1))),  # 40 bits away: distinct
    ]
    groups = group_near_duplicates(prints, DedupParams())
    assert [(g.group_id, g.episode_ids) for g in groups] == [("g1", (1, 2, 6)), ("g3", (3, 4, 5))]
    assert groups[1].reasons == ("message", "video")
    assert pick_representatives(groups) == {"g1": 1, "g3": 3}
    assert pick_representatives(groups, {2: 0.9, 6: 0.5, 5: 0.1}) == {"g1": 2, "g3": 5}
    assert pick_representatives([Group("g9", (9, 10))], {10: None}) == {"g9": 9}  # type: ignore[dict-item]


def _brute_force_pairs(codes: np.ndarray, queries: np.ndarray, radius: int) -> set[tuple[int, int]]:
    d = np.bitwise_count(queries[:, None] ^ codes[None, :])
    return {(int(q), int(i)) for q, i in zip(*np.nonzero(d <= radius), strict=True)}


@pytest.mark.parametrize("radius", [0, 3, 8, 11])
def test_range_search_finds_exactly_the_pairs_brute_force_finds(radius: int) -> None:
    rng = np.random.default_rng(radius)
    codes = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    # queries at every distance 0 .. radius + 3 from an indexed hash, and unrelated ones
    flips = [rng.choice(64, size=d, replace=False) for d in range(radius + 4) for _ in range(20)]
    near = [int(codes[k]) ^ sum(1 << int(b) for b in bits) for k, bits in enumerate(flips)]
    queries = np.asarray(near + rng.integers(0, 2**64, size=200, dtype=np.uint64).tolist(), dtype=np.uint64)
    q, i = HashIndex(codes, radius).near_pairs(queries)
    found = list(zip(q.tolist(), i.tolist(), strict=True))
    assert len(found) == len(set(found))  # each pair once
    assert set(found) == _brute_force_pairs(codes, queries, radius)
    assert sum(1 for x, _ in found if x < len(near)) >= 20 * (radius + 1)  # every planted one within radius


def test_unrelated_episodes_are_not_compared() -> None:
    """The old band buckets compared 19,878 of the 19,900 pairs of 200 unrelated episodes."""
    rng = np.random.default_rng(7)
    prints = [
        Fingerprint(e, phashes=tuple(rng.integers(0, 2**64, size=60, dtype=np.uint64).tolist()))
        for e in range(200)
    ]
    copy = tuple(h ^ 0b1011 for h in prints[5].phashes[10:50])  # a 40-frame cut of episode 5, re-encoded
    grouping = find_groups([*prints, Fingerprint(999, phashes=copy)])
    assert [g.episode_ids for g in grouping.groups] == [(5, 999)]
    assert grouping.compared == 1


def test_the_candidate_search_agrees_with_comparing_every_pair() -> None:
    """Random short videos, many of them near one another: the grouping equals all-pairs video_match."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**64, size=12, dtype=np.uint64).tolist()
    prints = []
    for e in range(120):
        picks = rng.choice(len(base), size=int(rng.integers(2, 9)), replace=False)
        noise = [
            sum(1 << int(b) for b in rng.choice(64, size=int(rng.integers(0, 12)), replace=False))
            for _ in picks
        ]
        prints.append(Fingerprint(e, phashes=tuple(base[p] ^ n for p, n in zip(picks, noise, strict=True))))
    params = DedupParams()
    pairs = video_pairs(prints, params).video_pairs
    expected = [
        (a.episode_id, b.episode_id)
        for k, a in enumerate(prints)
        for b in prints[k + 1 :]
        if video_match(a.phashes, b.phashes, params)
    ]
    assert pairs == expected and len(expected) >= 20


def _rechunk(src: Path, dst: Path) -> None:
    """The same messages, schemas and metadata in another chunking and compression."""
    with open(src, "rb") as fh_in, open(dst, "wb") as fh_out:
        reader = make_reader(fh_in)
        writer = Writer(fh_out, chunk_size=64 * 1024, compression=CompressionType.LZ4)
        writer.start(profile="", library="rechunk")
        schemas: dict[int, int] = {}
        channels: dict[int, int] = {}
        for schema, channel, message in reader.iter_messages(log_time_order=False):
            if schema is not None and schema.id not in schemas:
                schemas[schema.id] = writer.register_schema(schema.name, schema.encoding, schema.data)
            if channel.id not in channels:
                channels[channel.id] = writer.register_channel(
                    channel.topic,
                    channel.message_encoding,
                    schemas.get(channel.schema_id, 0),
                    channel.metadata,
                )
            writer.add_message(
                channels[channel.id],
                log_time=message.log_time,
                data=message.data,
                publish_time=message.publish_time,
                sequence=message.sequence,
            )
        fh_in.seek(0)
        for record in make_reader(fh_in).iter_metadata():
            writer.add_metadata(record.name, record.metadata)
        writer.finish()


def _reencode(src: Path, dst: Path, *, scale: float, crf: int, gop: int, fragmented: bool = False) -> None:
    options = {"movflags": "frag_keyframe+empty_moov"} if fragmented else {}
    with av.open(str(src)) as inp, av.open(str(dst), "w", format="mp4", options=options) as out:
        stream = out.add_stream("libx264", rate=30)
        first = True
        for index, frame in enumerate(inp.decode(video=0)):
            if first:
                stream.width = int(frame.width * scale) // 8 * 8
                stream.height = int(frame.height * scale) // 8 * 8
                stream.pix_fmt = "yuv420p"
                stream.options = {"crf": str(crf), "g": str(gop), "bf": "0"}
                first = False
            out_frame = frame.reformat(width=stream.width, height=stream.height, format="yuv420p")
            out_frame.pts, out_frame.time_base = index, Fraction(1, 30)
            out.mux(stream.encode(out_frame))
        out.mux(stream.encode(None))


@pytest.mark.integration
def test_reencoded_and_rechunked_copies_group_across_vendors(
    tmp_path: Path, migrated_database_url: str
) -> None:
    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        robot_drop = tmp_path / "robot"
        make_robot_drop(robot_drop, RobotDropConfig(episodes=2, seconds=2, width=128, height=96))
        originals = sorted(robot_drop.rglob("*.mcap"))
        (robot_drop / "copies").mkdir()
        _rechunk(originals[0], robot_drop / "copies" / "rechunked.mcap")
        robot = vendor_from_example(
            "acme_robotics",
            robot_drop,
            annotate={
                "annotators": {"message_fingerprint": {"version": "1"}, "video_phash": {"version": "1"}}
            },
        )
        robot_eps = land(world, robot, robot_drop, "*.mcap")

        video_drop = tmp_path / "video"
        make_video_drop(video_drop, VideoDropConfig(clips=2, seconds=2, scene_cuts=1, width=480, height=360))
        clips = sorted(video_drop.rglob("*.mp4"))
        (video_drop / "copies").mkdir()
        _reencode(clips[0], video_drop / "copies" / "smaller.mp4", scale=0.75, crf=33, gop=15)
        _reencode(
            clips[0], video_drop / "copies" / "fragmented.mp4", scale=1.0, crf=20, gop=60, fragmented=True
        )
        # the first robot episode's front camera, delivered again by the video vendor
        from pipeline.annotate.source import EpisodeSource
        from pipeline.enums import SourceKind

        front = EpisodeSource(0, SourceKind.MCAP, originals[0], "", camera_topic="/cam/front/h264")
        _camera_to_mp4(front, video_drop / "copies" / "front_again.mp4")
        video = vendor_from_example(
            "northwind_video",
            video_drop,
            annotate={"annotators": {"video_phash": {"version": "1", "params": {"every_n_frames": 10}}}},
        )
        video_eps = land(world, video, video_drop, "*.mp4")

        run_step(AnnotateStep(robot, world.ctx), batch_items(robot_drop, "*.mcap"))
        run_step(AnnotateStep(video, world.ctx), batch_items(video_drop, "*.mp4"))
        groups, kept = run_dedup(world.ctx.engine)

        by_path = {
            **{f"robot/{p}": e for p, e in robot_eps.items()},
            **{f"video/{p}": e for p, e in video_eps.items()},
        }
        assert len(by_path) == 8
        rel = {e: p for p, e in by_path.items()}
        found = sorted(sorted(rel[e] for e in g.episode_ids) for g in groups)
        first_robot = f"robot/{originals[0].relative_to(robot_drop)}"
        first_clip = f"video/{clips[0].relative_to(video_drop)}"
        assert found == sorted(
            [
                sorted([first_robot, "robot/copies/rechunked.mcap", "video/copies/front_again.mp4"]),
                sorted([first_clip, "video/copies/smaller.mp4", "video/copies/fragmented.mp4"]),
            ]
        )
        # the earliest landed episode of each group is kept by default, and the catalog says so
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            rows = session.execute(select(Annotation).where(Annotation.annotator == "dedup")).scalars().all()
        values = {(a.episode_id, a.key): a.value for a in rows}
        for group in groups:
            assert kept[group.group_id] == min(group.episode_ids)
            for e in group.episode_ids:
                assert values[(e, "dedup.group")] == group.group_id
                assert values[(e, "dedup.representative")] == min(group.episode_ids)
                assert values[(e, "dedup.group_size")] == 3
        singles = set(by_path.values()) - {e for g in groups for e in g.episode_ids}
        assert len(singles) == 2
        for e in singles:
            assert values[(e, "dedup.group")] == f"g{e}" and values[(e, "dedup.representative")] == e

        # the pipeline's task groups again over everything: nothing changed, so nothing is written
        from pipeline import orchestrate

        again = orchestrate.dedup(world.ctx)
        assert again == {
            "status": "grouped",
            "episodes": 8,
            "groups": 2,
            "grouped_episodes": 6,
            "pairs_compared": again["pairs_compared"],
            "rows_written": 0,
        }
        assert 2 <= again["pairs_compared"] <= 8
    finally:
        world.close()


def _camera_to_mp4(source: object, dst: Path) -> None:
    """Decode a robot log's camera and write it as an MP4 clip (another vendor's copy of the footage)."""
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    from pipeline.mcaplog import iter_messages

    decoder = av.CodecContext.create("h264", "r")
    index = 0
    with av.open(str(dst), "w", format="mp4") as out:
        stream = None
        for _s, _c, message in iter_messages(source.path, [source.camera_topic]):  # type: ignore[attr-defined]
            for frame in decoder.decode(av.Packet(CompressedVideo.FromString(message.data).data)):
                if stream is None:
                    stream = out.add_stream("libx264", rate=30)
                    stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
                    stream.options = {"crf": "23"}
                big = frame.reformat(width=320, height=240, format="yuv420p")
                big.pts, big.time_base = index, Fraction(1, 30)
                index += 1
                out.mux(stream.encode(big))
        assert stream is not None
        out.mux(stream.encode(None))
