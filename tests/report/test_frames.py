"""The contact sheet's frame of a held-back robot log, for every camera family a fleet records: the
raw file read front to back with the stock stream reader until its damage, the picture decoded by the
family's own decoder (video from its last keyframe, a still image or raw picture on its own)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import av
import pytest

from pipeline.report.frames import raw_log_frame
from pipeline.synth.calibration import make_calibration
from pipeline.synth.flavors import FLAVOR_NAMES
from pipeline.synth.mutate import truncate_mid_chunk
from pipeline.synth.robot import EpisodeMedia, EpisodeSpec, EpisodeTweaks, write_episode

START_NS = 1_700_000_000_000_000_000
WIDTH, HEIGHT = 96, 72


def _episode(path: Path, flavor: str, tweaks: EpisodeTweaks | None = None) -> Path:
    spec = EpisodeSpec(
        "rb01",
        "rb01-s",
        "rb01-s-e000",
        "pick",
        "op",
        START_NS,
        2.0,
        0,
        make_calibration(0, 0, "rb01", 0, WIDTH, HEIGHT),
    )
    # small chunks, so that a cut in the middle one leaves whole chunks before it
    media = EpisodeMedia(width=WIDTH, height=HEIGHT, flavor=flavor, chunk_size_bytes=32 << 10)
    write_episode(path, spec, media, tweaks)
    return path


def _picture(uri: str | None) -> av.VideoFrame:
    assert uri is not None and uri.startswith("data:image/jpeg;base64,")
    with av.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as container:
        return next(container.decode(video=0))


@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_a_cut_off_log_of_any_camera_family_shows_its_last_frame_before_the_damage(
    flavor: str, tmp_path: Path
) -> None:
    path = _episode(tmp_path / "episode.mcap", flavor)
    with open(path, "rb") as handle:  # whole: the frame in the middle
        whole = raw_log_frame(handle, None, at_ns=START_NS + 1_000_000_000, start_ns=START_NS, why=None)
    assert whole.note.endswith("middle of the episode"), whole.note
    assert whole.at_s is not None and 0.8 <= whole.at_s <= 1.0, whole.at_s
    assert _picture(whole.data_uri).width == 192
    truncate_mid_chunk(path)
    with open(path, "rb") as handle:
        cut = raw_log_frame(handle, None, at_ns=None, start_ns=START_NS, why=None)
    assert "last frame before the damage" in cut.note, cut.note
    assert cut.note.startswith("/"), cut.note  # the camera topic it came from
    assert cut.at_s is not None and 0 <= cut.at_s < 2.0
    _picture(cut.data_uri)


def test_a_broken_jpeg_is_passed_over_for_the_newest_picture_that_decodes(tmp_path: Path) -> None:
    from mcap.reader import make_reader

    from pipeline.synth import layout
    from pipeline.synth.flavors import flavor

    camera = layout.CAMERA_NAMES[0]
    topic = flavor("ros2-jpeg").camera_topic(camera)
    clean = _episode(tmp_path / "clean.mcap", "ros2-jpeg")
    broken = _episode(
        tmp_path / "broken.mcap",
        "ros2-jpeg",
        EpisodeTweaks(corrupt_image_camera=camera, corrupt_image_frame=30),
    )
    with open(broken, "rb") as handle:
        times = [m.log_time for _, _, m in make_reader(handle).iter_messages(topics=[topic])]
    shown = {}
    for name, path in (("clean", clean), ("broken", broken)):
        with open(path, "rb") as handle:  # asked for the time the broken picture is logged at
            shown[name] = raw_log_frame(handle, topic, at_ns=times[30], start_ns=START_NS, why="decode_error")
        assert shown[name].data_uri is not None and shown[name].note.startswith(topic), shown[name].note
    assert shown["clean"].at_s == pytest.approx((times[30] - START_NS) / 1e9)
    assert shown["broken"].at_s == pytest.approx((times[29] - START_NS) / 1e9)  # the one before it


def test_a_log_without_a_camera_says_so(tmp_path: Path) -> None:
    """Not "no frame could be read", which reads as a failure: a log of state and actions has no picture."""
    from mcap.writer import Writer

    path = tmp_path / "state.mcap"
    with open(path, "wb") as fh:
        writer = Writer(fh)
        writer.start()
        schema = writer.register_schema("state", "jsonschema", b"{}")
        channel = writer.register_channel("/robot/joint_states", "json", schema)
        for k in range(3):
            writer.add_message(
                channel, log_time=START_NS + k, data=b'{"position": [0.0]}', publish_time=START_NS + k
            )
        writer.finish()
    with open(path, "rb") as handle:
        shown = raw_log_frame(handle, None, at_ns=None, start_ns=START_NS, why=None)
    assert (shown.data_uri, shown.note) == (None, "no camera in this log")
