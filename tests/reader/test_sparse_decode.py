"""Sparse decoding returns exactly what a full sequential decode returns, while decoding only the
requested frames' merged dependency closures (pipeline.reader.decode).

The requests are random sets of frames of one camera, biased to the places a closure can go wrong: the
first and last frames, the anchors and the frames either side of them, with duplicates and in any order.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader
from reader_helpers import PROVENANCE, make_episode, robot_config

from pipeline.reader import EpisodeReader
from pipeline.reader.decode import DECODERS, closure, plan_runs
from pipeline.reader.videofile import VideoFileReader, full_decode
from pipeline.transcode import transcode_episode

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "video"


def _full(path: Path, reader: EpisodeReader, camera: str) -> dict[int, np.ndarray]:
    """Display index -> picture of one camera, decoded from its first access unit to its last."""
    table = reader.index.cameras[camera]
    units = []
    with open(path, "rb") as fh:
        for _, _, message in make_reader(fh).iter_messages(topics=[table.topic], log_time_order=False):
            units.append(CompressedVideo.FromString(message.data).data)
    decoder = av.CodecContext.create(DECODERS[table.codec], "r")
    pictures = {}
    for position, data in enumerate(units):
        packet = av.Packet(data)
        packet.pts = position
        pictures.update({int(f.pts): f.to_ndarray(format="rgb24") for f in decoder.decode(packet)})
    pictures.update({int(f.pts): f.to_ndarray(format="rgb24") for f in decoder.decode(None)})
    return {k: pictures[p] for k, p in enumerate(table.display)}


def _requests(rng: random.Random, frames: int, anchors: list[int], count: int) -> list[list[int]]:
    edges = sorted({0, frames - 1} | {min(frames - 1, max(0, a + d)) for a in anchors for d in (-1, 0, 1)})
    out = []
    for _ in range(count):
        size = rng.randint(1, 6)
        picks = [rng.choice(edges) if rng.random() < 0.4 else rng.randrange(frames) for _ in range(size)]
        if rng.random() < 0.3:
            picks.append(picks[0])  # a duplicate
        rng.shuffle(picks)
        out.append(picks)
    return out


@pytest.fixture(scope="module")
def ddra(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    folder = tmp_path_factory.mktemp("ddra")
    source, _ = make_episode(folder, "vla")

    def get(codec: str) -> Path:
        out = folder / f"random_access_{codec}" / "episode.mcap"
        if not out.exists():
            config = robot_config("random_access")
            options = config.options.model_copy(update={"codec": codec})
            transcode_episode(source, out, type(config)(options, config.contract, config.truth), PROVENANCE)
        return out

    get.source = source  # type: ignore[attr-defined]
    return get


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_5000_requests_on_a_ddra_episode_match_a_full_decode(ddra: Callable[[str], Path], codec: str) -> None:
    path = ddra(codec)
    rng = random.Random(codec)
    with EpisodeReader(path) as reader:
        full = {name: _full(path, reader, name) for name in reader.cameras}
        requested = 0
        for name in reader.cameras:
            table = reader.index.cameras[name]
            anchors = [k for k, p in enumerate(table.display) if table.letters[p] in "IiP"]
            for picks in _requests(rng, len(table.display), anchors, 5000 // len(reader.cameras) + 1):
                frames, counters = reader.frames({name: picks})
                for k, frame in zip(picks, frames[name], strict=True):
                    assert np.array_equal(frame.image, full[name][k]), (name, picks, k)
                requested += len(picks)
                # one interval's frames: K + 2 decodes at most, a shared anchor once
                positions = [table.display[k] for k in picks]
                closures = {p for r in positions for p in closure(table.letters, table.pts_ns, r)}
                assert counters.frames_decoded == len(closures)
        assert reader.totals.samples >= 5000
        # a frame costs its two anchors at most, and merging makes it cheaper
        assert reader.totals.frames_decoded <= 3 * requested


def test_one_interval_costs_k_plus_two_decodes(ddra: Callable[[str], Path]) -> None:
    with EpisodeReader(ddra("h264")) as reader:
        name = reader.cameras[0]
        _, counters = reader.frames({name: [20, 22, 25, 30, 33]})  # between the anchors at 17 and 34
        assert counters.frames_decoded == 5 + 2
        # two intervals sharing the anchor at 34: 3 anchors, not 4
        _, counters = reader.frames({name: [20, 40]})
        assert counters.frames_decoded == 2 + 3


def test_h264_runs_split_where_an_anchor_is_skipped() -> None:
    letters = "Iibbbibbbibbbibbb"  # anchors every 4 frames, decode order
    pts = [0, 4, 1, 2, 3, 8, 5, 6, 7, 12, 9, 10, 11, 16, 13, 14, 15]
    runs = plan_runs(letters, pts, [2, 14], split_gaps=True)
    assert runs == [[0, 1, 2], [9, 13, 14]]  # the anchor at 8 is not needed: a new run at 12
    assert plan_runs(letters, pts, [2, 14], split_gaps=False) == [[0, 1, 2, 9, 13, 14]]
    assert plan_runs(letters, pts, [2, 6], split_gaps=True) == [[0, 1, 2, 5, 6]]  # 4 shared, one run


def test_native_source_is_read_sparsely_and_matches_a_full_decode(ddra: Callable[[str], Path]) -> None:
    source = ddra.source  # type: ignore[attr-defined]
    rng = random.Random(5)
    with EpisodeReader(source) as reader:
        assert reader.cameras and reader.index.metadata.get("sluice.frames") is None
        for name in reader.cameras:
            table = reader.index.cameras[name]
            assert table.letters.startswith("I" + "P" * 29 + "I")  # the robot's logger: GOP 30, P-frames
            full = _full(source, reader, name)
            anchors = [k for k, p in enumerate(table.display) if table.letters[p] == "I"]
            for picks in _requests(rng, len(table.display), anchors, 300):
                frames, counters = reader.frames({name: picks})
                assert all(np.array_equal(f.image, full[k]) for k, f in zip(picks, frames[name], strict=True))
                # a P-chain: from the GOP's keyframe to the latest request in it, once per GOP
                positions = [table.display[k] for k in picks]
                per_gop: dict[int, int] = {}
                for p in positions:
                    per_gop[p // 30] = max(per_gop.get(p // 30, 0), p % 30 + 1)
                assert counters.frames_decoded == sum(per_gop.values())


@pytest.mark.parametrize(
    ("name", "count"),
    [
        # real files at 720p and 1080p decode slowly: few requests each, biased to the anchors
        ("internal_emulator_transformer_output_180_rotated.mp4", 12),  # H.264, 720p, GOP 30, P-frames
        ("sample_video_only.mp4", 40),  # H.264 with reference B-frames
        ("sample_edit_list_no_sync_frame_before_edit.mp4", 4),  # HEVC, B-pyramid, CRA, an edit list
    ],
)
def test_native_mp4_from_the_corpus_matches_a_full_decode(name: str, count: int) -> None:
    path = CORPUS / name
    full = full_decode(path)
    rng = random.Random(name)
    with VideoFileReader(path) as reader:
        # frames a decode from the first packet outputs (the HEVC file's first ones precede its edit)
        shown = [k for k, p in enumerate(reader.display) if reader.pts[p] in full]
        anchors = [k for k in shown if reader.letters[reader.display[k]] in "Ii"]
        for picks in _requests(rng, len(shown), [shown.index(a) for a in anchors], count):
            indexes = [shown[k] for k in picks]
            images, _ = reader.frames(indexes)
            for k, image in zip(indexes, images, strict=True):
                assert np.array_equal(image, full[reader.pts[reader.display[k]]]), k
        assert reader.totals.decoded_per_frame < len(reader)  # never the whole stream per frame
