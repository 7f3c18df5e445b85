"""H.265 output (``transcode.codec: h265``): libx265 in the profile's GOP, audited by the post-gate from the
HEVC bitstream, decodable by FFmpeg's decoder, written as ``foxglove.CompressedVideo`` format ``h265``."""

from __future__ import annotations

import json
from pathlib import Path

import av
import pytest
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader
from transcode_helpers import PROVENANCE, config_for

from pipeline.config import QualityPost
from pipeline.transcode import transcode_episode
from pipeline.transcode.h265 import access_unit_info
from pipeline.transcode.postgate import check_episode


@pytest.fixture(scope="module")
def h265_outputs(source_episode: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for profile in ("vla", "random_access"):
        path = tmp_path_factory.mktemp(f"h265_{profile}") / "episode.mcap"
        transcode_episode(source_episode, path, config_for(profile, codec="h265"), PROVENANCE)
        out[profile] = path
    return out


def _messages(path: Path) -> dict[str, list[CompressedVideo]]:
    found: dict[str, list[CompressedVideo]] = {}
    with open(path, "rb") as fh:
        for _, channel, message in make_reader(fh).iter_messages(log_time_order=False):
            if channel.metadata.get("sluice.group") == "cameras":
                found.setdefault(channel.topic, []).append(CompressedVideo.FromString(message.data))
    return found


@pytest.mark.parametrize(
    ("profile", "display"),
    [("vla", "I" + "P" * 9 + "I"), ("random_access", "I" + "b" * 16 + "i" + "b" * 16 + "i")],
)
def test_h265_output_has_the_profile_gop_and_passes_the_post_gate(
    profile: str, display: str, h265_outputs: dict[str, Path], source_episode: Path
) -> None:
    path = h265_outputs[profile]
    checks = check_episode(path, source_episode, config_for(profile, codec="h265"), QualityPost())
    assert all(c.passed for c in checks), [(c.name, c.detail) for c in checks if not c.passed]
    with open(path, "rb") as fh:
        meta = {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}
    assert (
        meta["sluice.transcode"]["codec"] == "h265" and "keyint=" in meta["sluice.transcode"]["x265_params"]
    )
    for name, text in meta["sluice.frames"].items():
        table = json.loads(text)
        assert table["codec"] == "h265"
        shown = "".join(
            table["types"][i] for i in sorted(range(len(table["pts_ns"])), key=table["pts_ns"].__getitem__)
        )
        assert shown.startswith(display), (name, shown)
    for topic, videos in _messages(path).items():
        assert {v.format for v in videos} == {"h265"}
        infos = [access_unit_info(v.data) for v in videos]
        # every keyframe carries its parameter sets, so a player or the reader may start there
        assert all(i.coders == {"cabac"} for i in infos if i.random_access), topic
        assert all(i.temporal_id == 0 for i in infos)
        decoder = av.CodecContext.create("hevc", "r")
        decoded = sum(len(decoder.decode(av.Packet(v.data))) for v in videos) + len(decoder.decode(None))
        assert decoded == len(videos)


def test_post_gate_refuses_h264_frames_where_h265_was_asked(transcoded: object, source_episode: Path) -> None:
    h264 = transcoded("random_access")  # type: ignore[operator]
    checks = {
        c.name: c
        for c in check_episode(
            h264.path, source_episode, config_for("random_access", codec="h265"), QualityPost()
        )
    }
    assert not checks["gop"].passed or not checks["decode"].passed
