"""Cameras that film real footage (``pipeline.synth.footage``, ``sluice synth robot --footage``), on the
corpus's real camera clip."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
from synth_helpers import decode_annexb, read_linear
from typer.testing import CliRunner

from pipeline.cli.synth import app
from pipeline.errors import ConfigError
from pipeline.media.framecode import FrameCode, read_frame_code
from pipeline.synth import layout
from pipeline.synth.footage import FootageError, FootageScene, check_footage

runner = CliRunner(env={"COLUMNS": "200"})
#: 149 frames of 1280x720 H.264 a camera filmed indoors (a room, a dog, a person).
CLIP = "video/internal_emulator_transformer_output_180_rotated.mp4"


@pytest.fixture(scope="module")
def clip(corpus_dir: Path) -> Path:
    return corpus_dir / CLIP


def _luma(yuv: np.ndarray, width: int, height: int) -> np.ndarray:
    return yuv.reshape(-1)[: width * height].reshape(height, width)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_the_footage_plays_forward_then_backward_in_each_cameras_window(clip: Path) -> None:
    cameras = [FootageScene(clip, 160, 120, i, 3) for i in range(3)]
    front = cameras[0]
    assert front.frames == 149
    n = front.frames
    # forward to the last frame, then backward without repeating it, then forward again
    assert [front.source_index(k) for k in (0, 1, n - 1, n, 2 * n - 3, 2 * n - 2, 2 * n - 1)] == [
        0, 1, n - 1, n - 2, 1, 0, 1,
    ]  # fmt: skip
    for k in (5, 60):
        assert np.array_equal(
            front.render(0.0, grain_index=k), front.render(0.0, grain_index=2 * (n - 1) - k)
        )
    # the scene moves, and the three cameras see three different windows of it
    assert _psnr(front.render(0.0, grain_index=0), front.render(0.0, grain_index=60)) < 30
    views = [_luma(c.render(0.0, grain_index=10), 160, 120) for c in cameras]
    assert _psnr(views[0], views[2]) < 20 and _psnr(views[0], views[1]) < 25


def test_the_camera_window_is_the_footage_scaled(clip: Path) -> None:
    """Camera 0 of 3 at 4:3 sees the left 960x720 of the 1280x720 picture, scaled: compare with PyAV's own
    scaling of that crop."""
    with av.open(str(clip)) as container:
        first = next(container.decode(video=0)).to_ndarray(format="rgb24")
    crop = av.VideoFrame.from_ndarray(np.ascontiguousarray(first[:, :960]), format="rgb24")
    expected = crop.reformat(width=320, height=240, format="yuv420p").to_ndarray()
    got = FootageScene(clip, 320, 240, 0, 3).render(0.0, grain_index=0)
    assert np.array_equal(got, expected)


def test_robot_drop_films_the_footage_with_frame_codes(clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "drop"
    args = ["robot", str(out), "--episodes", "1", "--seconds", "1", "--robots", "1", "--jobs", "1"]
    result = runner.invoke(app, [*args, "--footage", str(clip)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "drop.json").read_text())
    log = read_linear(out / manifest["files"][0]["path"])
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    units = [CompressedVideo.FromString(m.data).data for m in log.topic(layout.camera_topic("wrist_left"))]
    frames = decode_annexb(units)
    assert len(frames) == 30
    scene = FootageScene(clip, 320, 240, 1, 3)
    for k in (0, 17, 29):
        code = read_frame_code(frames[k])
        assert (code.frame_index, code.camera_id) == (k, 1)
        rendered = scene.render(0.0, grain_index=k, code=FrameCode(k, 1))
        picture = av.VideoFrame.from_ndarray(rendered, format="yuv420p").to_ndarray(format="rgb24")
        # the camera shows the footage (through the logger's H.264 at CRF 23)
        assert _psnr(frames[k], picture) > 30


def test_bad_footage_is_a_clear_error(corpus_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FootageError, match="no video stream"):
        check_footage(corpus_dir / "video/sample_audio_only.mp4")
    with pytest.raises(FootageError, match="no such file"):
        check_footage(tmp_path / "missing.mp4")
    with pytest.raises(FootageError, match="a folder, not a video file"):
        check_footage(tmp_path)
    result = runner.invoke(
        app, ["robot", str(tmp_path / "d"), "--footage", str(corpus_dir / "video/sample_audio_only.mp4")]
    )
    assert isinstance(result.exception, ConfigError)
    assert "sample_audio_only.mp4" in str(result.exception) and "no video stream" in str(result.exception)
    assert not (tmp_path / "d" / "drop.json").exists()
