"""Cameras that film real footage: the frames of a video file in place of the procedural scene.

The procedural scene (:mod:`pipeline.synth.scene`) is cheap and deterministic, but its picture statistics
are its own: a periodic texture, a flat box crossing it and uniform per-frame grain. Codec comparisons
depend on those statistics (how much of a frame a neighbouring one predicts, how much noise is left to
code), so a benchmark that compares layouts also wants pictures a real camera took. A
:class:`FootageScene` plays a video file as one camera of a synthetic episode:

* camera ``i`` of ``n`` sees its own window of the footage: the largest region with the camera's aspect
  ratio, slid from the left edge (camera 0) to the right edge (camera ``n - 1``), scaled to the camera's
  size; several cameras of one episode therefore see different parts of the same scene;
* the pictures are taken as they are coded in the file: a display rotation it records is not applied
  (a codec's work does not depend on it);
* the footage plays forward, then backward, then forward again, as long as the episode lasts: no frame
  jumps, so a codec sees motion, never a cut it would not meet in a robot's log.

It renders into the same yuv420p layout as :class:`~pipeline.synth.scene.SceneGenerator` and takes the
same arguments (``grain_index`` is the frame number), so the episode writer can use either.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from pipeline.errors import SluiceError
from pipeline.media.framecode import FrameCode, frame_code_region
from pipeline.synth.scene import check_frame_size, stamp_frame_code, yuv420p_buffer

#: Frames kept per camera, at most: a clip longer than this is cut (a minute at 30 fps; 640x480 yuv420p
#: is 460 KB a frame, so about 830 MB per camera at the limit).
MAX_FOOTAGE_FRAMES = 1800
#: A clip shorter than this cannot make an episode that moves.
MIN_FOOTAGE_FRAMES = 2


class FootageError(SluiceError, ValueError):
    """The footage file cannot be played as a camera (missing, unreadable, no video, too short)."""

    def __init__(self, path: str | Path, detail: str) -> None:
        self.path = str(path)
        super().__init__(f"footage {path}: {detail}")


class FootageScene:
    """Camera ``camera_index`` of ``cameras`` filming the video at ``path`` (see the module docstring)."""

    def __init__(self, path: str | Path, width: int, height: int, camera_index: int = 0, cameras: int = 1):
        check_frame_size(width, height)
        if not 0 <= camera_index < cameras:
            raise ValueError(f"camera_index {camera_index} is not in 0..{cameras - 1}")
        self.path = str(path)
        self.width, self.height = width, height
        self._frames = _footage_frames(self.path, width, height, camera_index, cameras)
        frame_code_region(width, height)  # a size too small for a frame code fails here, not at a render

    @property
    def frames(self) -> int:
        """Distinct frames of the footage (the episode repeats them forward and backward)."""
        return len(self._frames)

    def source_index(self, frame_index: int) -> int:
        """The footage frame shown at episode frame ``frame_index``: forward, backward, forward, ..."""
        n = len(self._frames)
        if n == 1:
            return 0
        period = 2 * (n - 1)
        k = frame_index % period
        return k if k < n else period - k

    def render(
        self,
        t_s: float,
        *,
        grain_index: int = 0,
        scene_id: int = 0,
        code: FrameCode | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Episode frame ``grain_index`` as a ``(H*3/2, W)`` yuv420p array (``t_s`` and ``scene_id`` are
        accepted for :class:`~pipeline.synth.scene.SceneGenerator`'s signature; the frame number decides)."""
        if out is None:
            out = yuv420p_buffer(self.width, self.height)[0]
        out[:] = self._frames[self.source_index(grain_index)]
        if code is not None:
            stamp_frame_code(out, self.width, self.height, code)
        return out


def check_footage(path: str | Path) -> None:
    """Raise :class:`FootageError` unless ``path`` is a video file with at least two decodable frames
    (the check a drop config runs when it loads, before any episode is written)."""
    _footage_frames(str(path), 64, 48, 0, 1)


@lru_cache(maxsize=8)
def _footage_frames(
    path: str, width: int, height: int, camera_index: int, cameras: int
) -> tuple[np.ndarray, ...]:
    """Every frame of the footage as this camera sees it, decoded once per process (the episodes of a drop
    share them)."""
    import av

    if not Path(path).is_file():
        raise FootageError(path, "a folder, not a video file" if Path(path).is_dir() else "no such file")
    frames: list[np.ndarray] = []
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise FootageError(path, "the file has no video stream")
            stream = container.streams.video[0]
            for frame in container.decode(stream):
                frames.append(
                    _camera_view(frame.to_ndarray(format="rgb24"), width, height, camera_index, cameras)
                )
                if len(frames) >= MAX_FOOTAGE_FRAMES:
                    break
    except FootageError:
        raise
    except (av.FFmpegError, OSError) as exc:
        raise FootageError(path, f"cannot be decoded: {exc}") from exc
    if len(frames) < MIN_FOOTAGE_FRAMES:
        raise FootageError(path, f"{len(frames)} frame(s) decoded, at least {MIN_FOOTAGE_FRAMES} needed")
    return tuple(frames)


def _camera_view(rgb: np.ndarray, width: int, height: int, camera_index: int, cameras: int) -> np.ndarray:
    """Camera ``camera_index``'s window of ``rgb`` (the largest with the camera's aspect ratio, slid across
    the picture), scaled to ``width`` x ``height``, as yuv420p (limited range, BT.601, as the scene)."""
    import av

    src_h, src_w = rgb.shape[:2]
    crop_w = min(src_w, src_h * width // height) & ~1
    crop_h = min(src_h, src_w * height // width) & ~1
    free_x, free_y = src_w - crop_w, src_h - crop_h
    x0 = (free_x * camera_index // max(cameras - 1, 1)) & ~1
    y0 = (free_y // 2) & ~1
    window = np.ascontiguousarray(rgb[y0 : y0 + crop_h, x0 : x0 + crop_w])
    frame = av.VideoFrame.from_ndarray(window, format="rgb24")
    return frame.reformat(width=width, height=height, format="yuv420p").to_ndarray()


__all__ = ["MAX_FOOTAGE_FRAMES", "FootageError", "FootageScene", "check_footage"]
