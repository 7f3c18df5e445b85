"""One episode on the export's frame grid: pictures with their own stamps, values never from after a frame,
damaged or unresampled inputs read or refused by name."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from mcap.reader import make_reader
from mcap.writer import Writer

from pipeline.config import VendorConfig
from pipeline.errors import InputError
from pipeline.export.episode import EpisodeFrames, read_episode
from pipeline.mcaplog import McapInputError
from pipeline.synth import RobotDropConfig, make_robot_drop
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode

REPO = Path(__file__).resolve().parents[2]


def _vendor(**transcode: Any) -> VendorConfig:
    data = yaml.safe_load((REPO / "dags" / "vendors" / "acme_robotics.yaml").read_text())
    data["transcode"] = {**data["transcode"], **transcode}
    return VendorConfig.model_validate(data)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    drop = tmp_path_factory.mktemp("drop")
    make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=2, width=64, height=48))
    (path,) = sorted(drop.rglob("*.mcap"))
    return path


def _transcoded(source: Path, vendor: VendorConfig, out: Path) -> Path:
    transcode_episode(source, out, RobotTranscodeConfig.from_vendor(vendor), Provenance("a" * 64, "b", "c"))
    return out


def _rewrite(source: Path, out: Path, keep: Callable[[str, dict[str, Any]], bool]) -> Path:
    """A copy of ``source`` without the JSON messages ``keep(topic, payload)`` refuses."""
    with open(source, "rb") as fh, open(out, "wb") as sink:
        writer = Writer(sink)
        writer.start()
        schemas: dict[int, int] = {}
        channels: dict[int, int] = {}
        for schema, channel, message in make_reader(fh).iter_messages(log_time_order=True):
            if channel.message_encoding == "json" and not keep(channel.topic, json.loads(message.data)):
                continue
            if channel.id not in channels:
                assert schema is not None
                if schema.id not in schemas:
                    schemas[schema.id] = writer.register_schema(schema.name, schema.encoding, schema.data)
                channels[channel.id] = writer.register_channel(
                    channel.topic, channel.message_encoding, schemas[schema.id], dict(channel.metadata)
                )
            writer.add_message(
                channels[channel.id], message.log_time, message.data, message.publish_time, message.sequence
            )
        writer.finish()
    return out


def _front(frames: EpisodeFrames) -> np.ndarray:
    """Camera ``front``'s pictures, as the export takes them."""
    pictures = [p.to_ndarray(format="rgb24") for camera, p in frames.pictures() if camera == "front"]
    assert len(pictures) == frames.length
    return np.stack(pictures)


def _gap(one: np.ndarray, other: np.ndarray) -> float:
    return float(np.abs(one.astype(np.int16) - other.astype(np.int16)).mean())


def test_b_frames_keep_their_own_stamps(source: Path, tmp_path: Path) -> None:
    """random_access has B-frames: the decoder returns pictures in display order, not in the order of the
    messages (decode order). Pairing the n-th picture with the n-th message's stamp shifted every picture
    of the episode by a frame or more against its state."""
    vendor = _vendor(profile="random_access", gop_frames=17)
    out = _transcoded(source, vendor, tmp_path / "episode.mcap")
    with open(out, "rb") as fh:
        frames = {m.name: m.metadata for m in make_reader(fh).iter_metadata()}["sluice.frames"]
    assert "b" in json.loads(frames["front"])["types"].lower()  # the case this test is about
    reordered, raw = read_episode(out, vendor), read_episode(source, vendor)
    assert reordered.length == raw.length > 50
    reordered_front, raw_front = _front(reordered), _front(raw)
    for k in range(raw.length):
        same = _gap(reordered_front[k], raw_front[k])
        neighbours = [_gap(reordered_front[j], raw_front[k]) for j in (k - 1, k + 1) if 0 <= j < raw.length]
        assert same < min(neighbours), (k, same, neighbours)  # each frame is its own source picture


def test_frames_before_every_stream_has_begun_are_left_out(source: Path, tmp_path: Path) -> None:
    """No frame gets a state or action from after it: when the actions begin 1 s into the log, the frames
    of that first second are not exported (they used to get the first action, recorded later)."""
    with open(source, "rb") as fh:
        start = min(m.log_time for _, _, m in make_reader(fh).iter_messages(topics=["/robot/action"]))
    late = _rewrite(
        source,
        tmp_path / "late.mcap",
        lambda topic, payload: topic != "/robot/action" or payload["stamp_ns"] >= start + 1_000_000_000,
    )
    vendor = _vendor()
    full = _front(read_episode(source, vendor))
    for path in (late, _transcoded(late, vendor, tmp_path / "episode.mcap")):
        cut = read_episode(path, vendor)
        assert len(full) - 33 <= cut.length <= len(full) - 27, (path.name, cut.length, len(full))
        # the cut is at the start: the last picture is the full episode's last, not the one before it
        last = _front(cut)[-1]
        assert _gap(last, full[-1]) < _gap(last, full[-2]), path.name


def test_a_transcode_without_resampling_exports_from_its_native_streams(source: Path, tmp_path: Path) -> None:
    vendor = _vendor(resample_rate_hz=None)
    out = _transcoded(source, vendor, tmp_path / "episode.mcap")
    with open(out, "rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None and not [
        c for c in summary.channels.values() if c.topic.endswith("/resampled")
    ]
    native, raw = read_episode(out, vendor), read_episode(source, vendor)
    assert native.state_names == raw.state_names and native.action_names == raw.action_names
    np.testing.assert_array_equal(native.state, raw.state)


def test_damaged_files_are_input_errors_naming_them(source: Path, tmp_path: Path) -> None:
    vendor = _vendor()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(source.read_bytes()[: source.stat().st_size - 300])  # the summary's end is gone
    empty = tmp_path / "empty.mcap"
    empty.write_bytes(b"")
    for path in (cut, empty):
        with pytest.raises(McapInputError, match=re.escape(f"{path.name}: summary unreadable")):
            read_episode(path, vendor)
    # a log whose summary lists no channels (a writer that leaves them out) is refused, not misread
    bare = tmp_path / "bare.mcap"
    with open(source, "rb") as fh, open(bare, "wb") as sink:
        writer = Writer(sink, repeat_channels=False, repeat_schemas=False)
        writer.start()
        ids: dict[str, int] = {}
        for schema, channel, message in make_reader(fh).iter_messages():
            assert schema is not None
            if channel.topic not in ids:
                sid = writer.register_schema(schema.name, schema.encoding, schema.data)
                ids[channel.topic] = writer.register_channel(channel.topic, channel.message_encoding, sid)
            writer.add_message(ids[channel.topic], message.log_time, message.data, message.publish_time)
        writer.finish()
    with pytest.raises(InputError, match=r"bare\.mcap has no summary listing its channels"):
        read_episode(bare, vendor)


def test_a_vendor_without_cameras_is_refused_saying_so(source: Path) -> None:
    """Not "camera (none in the contract) is absent": the contract names no camera at all."""
    data = _vendor().model_dump(mode="json")
    data["topics"]["cameras"] = []
    with pytest.raises(InputError, match=r"the vendor's contract names no camera"):
        read_episode(source, VendorConfig.model_validate(data))


def test_the_same_episodes_export_to_the_same_bytes(source: Path, tmp_path: Path) -> None:
    """Re-running gives the same result: the videos too (x264 with one thread and no macroblock tree; see
    pipeline.media.x264), with other allocations between the two exports as in any real process."""
    from pipeline.export.lerobot import write_lerobot

    vendor = _vendor()
    episode = read_episode(source, vendor)
    digests = []
    for run in range(3):
        _ = [np.random.default_rng(run).bytes(1 << 20) for _ in range(8)]  # other work between the runs
        out = tmp_path / f"run{run}"
        write_lerobot([(1, "pick", episode), (2, "pick", episode)], out)
        digests.append(
            {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        )
    assert digests[0] == digests[1] == digests[2]


#: Takes an episode's pictures one by one in a fresh process (no freed heap from other tests to reuse) and
#: prints how many, the episode's length and how much resident memory grew meanwhile.
TAKE_PICTURES = """
import os, sys
from pathlib import Path
from pipeline.config import VendorConfig
from pipeline.export.episode import read_episode

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

frames = read_episode(Path(sys.argv[1]), VendorConfig.model_validate_json(Path(sys.argv[2]).read_text()))
start, grown, taken = rss(), 0, 0
for camera, picture in frames.pictures():
    assert (picture.height, picture.width) == frames.sizes[camera]
    taken += 1
    del picture
    grown = max(grown, rss() - start)
print(taken, frames.length, len(frames.sizes), grown)
"""


def test_an_episode_s_pictures_are_decoded_as_they_are_taken(tmp_path: Path) -> None:
    """The export holds a few pictures of an episode at a time, not the episode: each is let go once the
    writer has taken it (a 60 s episode of three 320x240 cameras held 3.3 GB when the episode's pictures
    were decoded whole first). With B-frames the decoder hands back a few at once: those wait their turn.
    Held whole, this episode's 720 pictures would take 83 MB as the decoder makes them (YUV 4:2:0), and
    a window of 90 of them (10 MB) is already too many."""
    import subprocess
    import sys

    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=8, width=320, height=240))
    (raw,) = sorted(drop.rglob("*.mcap"))
    vendor = _vendor(profile="random_access", gop_frames=17)
    episode = _transcoded(raw, vendor, tmp_path / "episode.mcap")
    config = tmp_path / "vendor.json"
    config.write_text(vendor.model_dump_json())
    done = subprocess.run(
        [sys.executable, "-c", TAKE_PICTURES, str(episode), str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    taken, length, cameras, grown = map(int, done.stdout.split())
    assert (cameras, taken) == (3, 3 * length) and length >= 235
    assert grown < 10 << 20, f"{grown / 2**20:.1f} MB more resident while the pictures were taken"


def _camera_letters(path: Path, topic: str, codec: str) -> list[str]:
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    from pipeline.transcode.bitstream import unit_letter

    with open(path, "rb") as fh:
        return [
            unit_letter(codec, CompressedVideo.FromString(m.data).data)
            for _, _, m in make_reader(fh).iter_messages(topics=[topic], log_time_order=True)
        ]


def _without_first(source: Path, out: Path, topic: str, count: int) -> Path:
    """A copy of ``source`` whose ``topic`` lacks its first ``count`` messages (a recording that began
    later on that camera)."""
    with open(source, "rb") as fh, open(out, "wb") as sink:
        writer = Writer(sink)
        writer.start()
        ids: dict[int, int] = {}
        seen = 0
        for schema, channel, message in make_reader(fh).iter_messages(log_time_order=True):
            if channel.topic == topic:
                seen += 1
                if seen <= count:
                    continue
            if channel.id not in ids:
                assert schema is not None
                sid = writer.register_schema(schema.name, schema.encoding, schema.data)
                ids[channel.id] = writer.register_channel(
                    channel.topic, channel.message_encoding, sid, dict(channel.metadata)
                )
            writer.add_message(ids[channel.id], message.log_time, message.data, message.publish_time)
        for name, metadata in _metadata(source).items():
            writer.add_metadata(name, metadata)
        writer.finish()
    return out


def _metadata(path: Path) -> dict[str, dict[str, str]]:
    with open(path, "rb") as fh:
        return {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}


def test_a_raw_camera_that_starts_between_keyframes_is_exported_from_its_first_keyframe(
    source: Path, tmp_path: Path
) -> None:
    """A log whose camera begins mid-GOP (a recording started between two keyframes): the pictures before
    the camera's first keyframe cannot be decoded, so the grid begins there, and every frame after it is
    the full log's picture, pixel for pixel."""
    vendor = _vendor()
    front = vendor.topics.cameras[0].topic if vendor.topics else ""
    letters = _camera_letters(source, front, "h264")
    assert letters[0] == "I" and "I" in letters[5:]  # the case this test is about
    # the first five pictures, the keyframe among them, are not recorded
    full, late = (
        read_episode(source, vendor),
        read_episode(_without_first(source, tmp_path / "late.mcap", front, 5), vendor),
    )
    skipped = letters[5:].index("I")  # the remaining pictures before the first keyframe
    assert full.length - late.length == 5 + skipped
    np.testing.assert_array_equal(_front(late), _front(full)[5 + skipped :])
    np.testing.assert_array_equal(late.state, full.state[5 + skipped :])


@pytest.mark.parametrize("codec", ["h264", "h265"])
def test_an_open_gop_camera_that_lost_its_idr_starts_at_the_next_anchor(
    source: Path, tmp_path: Path, codec: str
) -> None:
    """random_access is an open GOP: after an anchor come, in the log, the B-frames shown before it, which
    also predict from the anchor before. A camera whose IDR is lost starts at the next anchor, and those
    leading pictures cannot be decoded: they are left out of the grid (they failed the whole export)."""
    vendor = _vendor(profile="random_access", gop_frames=17, codec=codec)
    out = _transcoded(source, vendor, tmp_path / "episode.mcap")
    front = vendor.topics.cameras[0].topic if vendor.topics else ""
    letters = _camera_letters(out, front, codec)
    assert letters[0] == "I" and letters[1] == "i" and letters[2] == "b"  # the case this test is about
    full = read_episode(out, vendor)
    late = read_episode(_without_first(out, tmp_path / "late.mcap", front, 1), vendor)
    assert 0 < full.length - late.length < 20
    np.testing.assert_array_equal(_front(late), _front(full)[full.length - late.length :])


def test_the_export_reads_a_raw_log_s_state_and_actions_alone(source: Path) -> None:
    """The export's read of a raw log keeps no copy of the messages it does not use (a raw log's cameras
    were held whole, compressed, beside the state it read): the same series, no native messages."""
    from pipeline.transcode.source import read_source

    vendor = _vendor()
    assert vendor.topics is not None
    contract = vendor.topics.model_copy(update={"cameras": ()})
    whole = read_source(source, contract, vendor.timestamps.truth)
    alone = read_source(source, contract, vendor.timestamps.truth, native=False)
    assert whole.native and not alone.native
    assert (
        set(alone.channels) == {s.topic for s in (*contract.state, *contract.actions)} < set(whole.channels)
    )
    for mine, theirs in zip((*alone.state, *alone.actions), (*whole.state, *whole.actions), strict=True):
        assert mine.topic == theirs.topic and mine.records == theirs.records
        np.testing.assert_array_equal(mine.stamps_ns, theirs.stamps_ns)


def _luma_psnr(ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
    mse = np.mean([np.mean((a.astype(np.float64) - b) ** 2) for a, b in zip(ours, reference, strict=True)])
    return float(10 * np.log10(255**2 / mse))


def test_the_export_s_video_loses_no_more_than_one_encode(tmp_path: Path) -> None:
    """The export re-encodes each camera once, from the pictures as the episode's decoder makes them: its
    video is as close to the episode's pictures as one encode with the export's settings gets. Going
    through RGB and back cost 2.3 dB here (37.5 against 39.8 dB luma PSNR), 2-4.5 dB on a 60 s episode."""
    import av
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    from pipeline.export.lerobot import X264_OPTIONS, write_lerobot

    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=2, width=320, height=240))
    (raw,) = sorted(drop.rglob("*.mcap"))
    vendor = _vendor()
    episode = _transcoded(raw, vendor, tmp_path / "episode.mcap")
    front = vendor.topics.cameras[0].topic if vendor.topics else ""
    decoder = av.CodecContext.create("h264", "r")
    pictures: list[av.VideoFrame] = []
    with open(episode, "rb") as fh:
        for _, _, message in make_reader(fh).iter_messages(topics=[front], log_time_order=True):
            pictures += decoder.decode(av.Packet(CompressedVideo.FromString(message.data).data))
    pictures += decoder.decode(None)
    reference = [p.to_ndarray(format="yuv420p")[:240].astype(np.float64) for p in pictures]

    # one encode of the same pictures with the export's settings, decoded again
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = 320, 240, "yuv420p"
    encoder.time_base = Fraction(1, 30)
    encoder.options = dict(X264_OPTIONS)
    once = av.CodecContext.create("h264", "r")
    decoded: list[np.ndarray] = []
    for i, picture in enumerate([*pictures, None]):
        if picture is not None:
            picture.pts, picture.pict_type = i, av.video.frame.PictureType.NONE
        for packet in encoder.encode(picture):
            decoded += [f.to_ndarray(format="yuv420p")[:240] for f in once.decode(packet)]
    decoded += [f.to_ndarray(format="yuv420p")[:240] for f in once.decode(None)]
    one_encode = _luma_psnr(decoded, reference)

    frames = read_episode(episode, vendor)
    assert frames.length == len(reference)
    write_lerobot([(1, "pick", frames)], tmp_path / "out")
    (video,) = (tmp_path / "out").rglob("observation.images.front/**/*.mp4")
    with av.open(str(video)) as container:
        tags = container.streams.video[0].codec_context
        # limited-range BT.601 said in the stream: what encoder_input makes, for every reader alike
        assert (tags.color_range, tags.colorspace, tags.color_primaries, tags.color_trc) == (1, 6, 6, 6)
        exported = [f.to_ndarray(format="yuv420p")[:240] for f in container.decode(video=0)]
    assert one_encode > 35, one_encode
    assert _luma_psnr(exported, reference) >= one_encode - 0.2, (_luma_psnr(exported, reference), one_encode)


@pytest.mark.parametrize("tagged", ["full range", "BT.709", "BT.709 full range", "10-bit"])
def test_pictures_of_other_ranges_and_matrices_keep_their_colours(tagged: str) -> None:
    """The export's video is untagged, which decoders read as limited-range BT.601. A camera recorded in
    full range or with a BT.709 matrix is converted to that as its tags say (passed as it was, a full-range
    camera's whites and blacks were clipped and a BT.709 red came out another red); a BT.601 picture goes
    in as the decoder made it."""
    import av
    from av.video.reformatter import ColorRange, Colorspace

    from pipeline.export.lerobot import encoder_input

    y, x = np.mgrid[0:48, 0:64]
    rgb = np.stack([x * 4, y * 5, 255 - x * 3], axis=-1).clip(0, 255).astype(np.uint8)  # smooth, saturated
    source = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    full = ColorRange.JPEG if "full" in tagged else ColorRange.MPEG
    space = Colorspace.ITU709 if "709" in tagged else Colorspace.ITU601
    pix_fmt = "yuv420p10le" if tagged == "10-bit" else "yuv420p"
    picture = source.reformat(format=pix_fmt, dst_colorspace=space, dst_color_range=full)
    picture.color_range, picture.colorspace = full, space
    truth = picture.to_ndarray(format="rgb24").astype(np.int16)  # what the camera's tags say it shows
    sent = encoder_input(picture, 48, 64)
    assert sent.format.name == "yuv420p" and sent.color_range != ColorRange.JPEG
    # what a decoder makes of the export's untagged video: the same planes, read as limited-range BT.601
    seen = av.VideoFrame.from_ndarray(sent.to_ndarray(), format="yuv420p").to_ndarray(format="rgb24")
    error = np.abs(seen.astype(np.int16) - truth)
    # 1.2-1.4 levels on average, at most 6 (rounding, 4:2:0); passed as they were: 6.7-9.7, up to 38
    assert error.mean() < 2 and error.max() <= 8, (tagged, error.mean(), error.max())

    plain = source.reformat(format="yuv420p")  # limited range, BT.601: as an untagged decoder frame
    assert encoder_input(plain, 48, 64) is plain
