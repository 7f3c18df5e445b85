"""A frame index (and camera id) drawn into the pixels as a block code that survives lossy H.264.

The code is a grid of :data:`CODE_ROWS` x :data:`CODE_COLS` black or white cells covering the top-left
quarter of the frame. Its geometry is relative to the frame size, so a frame scaled by a transcode still
reads. Four corner cells are references (two white, two black) that give the reader its threshold and let it
reject frames with no code (an all-black frame has no contrast). The other 44 cells carry, most significant
bit first, the 24-bit frame index, the 4-bit camera id and 16 check bits (the low half of a CRC-32 of the
first two), so a damaged code is refused instead of misread.

Cells are big on purpose: at 128x96 a cell is 8x8 pixels, one H.264 transform block, and the reader only
looks at the centre half of each cell, where ringing from the block edges does not reach.

:func:`read_frame_index` also tries the four 90-degree orientations, so a frame that a transcode rotated
according to its container's display matrix still reads.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import numpy as np

from pipeline.errors import SluiceError

CODE_ROWS = 6
CODE_COLS = 8
FRAME_INDEX_BITS = 24
CAMERA_ID_BITS = 4
CHECK_BITS = 16
MAX_FRAME_INDEX = (1 << FRAME_INDEX_BITS) - 1
MAX_CAMERA_ID = (1 << CAMERA_ID_BITS) - 1
# The code covers this fraction of the frame's width and height (from the top-left corner).
CODE_FRACTION = 0.5
# Smallest cell edge in pixels: below this the H.264 block transform smears neighbouring cells together.
MIN_CELL_PX = 4
# The white references must exceed the black ones by this much (0-255 scale), or the frame carries no code.
MIN_CONTRAST = 96.0

# (row, col) of the reference cells and the level each carries (True = white).
_REFERENCES: tuple[tuple[int, int, bool], ...] = (
    (0, 0, True),
    (0, CODE_COLS - 1, False),
    (CODE_ROWS - 1, 0, False),
    (CODE_ROWS - 1, CODE_COLS - 1, True),
)
_REFERENCE_CELLS = frozenset((r, c) for r, c, _ in _REFERENCES)
_DATA_CELLS: tuple[tuple[int, int], ...] = tuple(
    (r, c) for r in range(CODE_ROWS) for c in range(CODE_COLS) if (r, c) not in _REFERENCE_CELLS
)
assert len(_DATA_CELLS) == FRAME_INDEX_BITS + CAMERA_ID_BITS + CHECK_BITS


class FrameCodeError(SluiceError, ValueError):
    """A frame code cannot be drawn (value out of range, frame too small) or read (absent or damaged)."""


@dataclass(frozen=True)
class FrameCode:
    """What a frame code carries."""

    frame_index: int
    camera_id: int


@functools.lru_cache(maxsize=64)
def _edges(width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel edges of the code's rows and columns for a frame of this size."""
    if width * CODE_FRACTION / CODE_COLS < MIN_CELL_PX or height * CODE_FRACTION / CODE_ROWS < MIN_CELL_PX:
        min_w = int(np.ceil(MIN_CELL_PX * CODE_COLS / CODE_FRACTION))
        min_h = int(np.ceil(MIN_CELL_PX * CODE_ROWS / CODE_FRACTION))
        raise FrameCodeError(f"frame {width}x{height} is too small for a frame code; minimum {min_w}x{min_h}")
    rows = np.round(np.linspace(0.0, height * CODE_FRACTION, CODE_ROWS + 1)).astype(np.intp)
    cols = np.round(np.linspace(0.0, width * CODE_FRACTION, CODE_COLS + 1)).astype(np.intp)
    return rows, cols


def frame_code_region(width: int, height: int) -> tuple[int, int]:
    """``(region_width, region_height)`` in pixels of the area, anchored top-left, that the code covers."""
    rows, cols = _edges(width, height)
    return int(cols[-1]), int(rows[-1])


def _check(payload: int) -> int:
    return zlib.crc32(payload.to_bytes(4, "big")) & ((1 << CHECK_BITS) - 1)


def _bits(frame_index: int, camera_id: int) -> list[bool]:
    payload = (frame_index << CAMERA_ID_BITS) | camera_id
    word = (payload << CHECK_BITS) | _check(payload)
    total = FRAME_INDEX_BITS + CAMERA_ID_BITS + CHECK_BITS
    return [bool((word >> (total - 1 - i)) & 1) for i in range(total)]


def code_pattern(frame_index: int, camera_id: int = 0) -> np.ndarray:
    """The ``(CODE_ROWS, CODE_COLS)`` boolean cell pattern (True = white) for this frame index and camera."""
    if not 0 <= frame_index <= MAX_FRAME_INDEX:
        raise FrameCodeError(f"frame_index {frame_index} out of range; allowed 0..{MAX_FRAME_INDEX}")
    if not 0 <= camera_id <= MAX_CAMERA_ID:
        raise FrameCodeError(f"camera_id {camera_id} out of range; allowed 0..{MAX_CAMERA_ID}")
    pattern = np.zeros((CODE_ROWS, CODE_COLS), dtype=bool)
    for r, c, white in _REFERENCES:
        pattern[r, c] = white
    for (r, c), bit in zip(_DATA_CELLS, _bits(frame_index, camera_id), strict=True):
        pattern[r, c] = bit
    return pattern


def draw_frame_code(
    image: np.ndarray, frame_index: int, camera_id: int = 0, *, black: int = 0, white: int = 255
) -> None:
    """Draw the code into ``image`` in place.

    ``image`` is a ``uint8`` array of shape ``(H, W)`` (a luma plane) or ``(H, W, C)`` (RGB). For a
    limited-range luma plane pass ``black=16, white=235``, the levels an RGB decoder maps to 0 and 255.
    """
    if image.ndim not in (2, 3) or image.dtype != np.uint8:
        raise FrameCodeError(
            f"image must be a uint8 array of shape (H, W) or (H, W, C); got {image.dtype} {image.shape}"
        )
    height, width = image.shape[:2]
    rows, cols = _edges(width, height)
    cells = np.where(code_pattern(frame_index, camera_id), np.uint8(white), np.uint8(black))
    # Blow each cell up to its pixel size (cells differ by a pixel where the size does not divide).
    levels = np.repeat(np.repeat(cells, np.diff(rows), axis=0), np.diff(cols), axis=1)
    if image.ndim == 3:
        image[: rows[-1], : cols[-1]] = levels[:, :, None]
    else:
        image[: rows[-1], : cols[-1]] = levels


def _cell_means(luma: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Mean level of the centre half of every cell (``rows``/``cols`` are the cell edges)."""
    means = np.empty((CODE_ROWS, CODE_COLS), dtype=np.float64)
    for r in range(CODE_ROWS):
        y0, y1 = int(rows[r]), int(rows[r + 1])
        qy = (y1 - y0) // 4
        for c in range(CODE_COLS):
            x0, x1 = int(cols[c]), int(cols[c + 1])
            qx = (x1 - x0) // 4
            means[r, c] = luma[y0 + qy : y1 - qy, x0 + qx : x1 - qx].mean()
    return means


def _decode(image: np.ndarray) -> FrameCode | str:
    """The code in this orientation, or why there is none."""
    height, width = image.shape[:2]
    try:
        rows, cols = _edges(width, height)
    except FrameCodeError as exc:
        return str(exc)
    region = image[: rows[-1], : cols[-1]]
    luma = region.mean(axis=2, dtype=np.float32) if region.ndim == 3 else region.astype(np.float32)
    means = _cell_means(luma, rows, cols)
    whites = [means[r, c] for r, c, white in _REFERENCES if white]
    blacks = [means[r, c] for r, c, white in _REFERENCES if not white]
    contrast = min(whites) - max(blacks)
    if contrast < MIN_CONTRAST:
        return f"reference cells differ by {contrast:.0f} levels, need >= {MIN_CONTRAST:.0f}"
    threshold = (min(whites) + max(blacks)) / 2.0
    word = 0
    for r, c in _DATA_CELLS:
        word = (word << 1) | int(means[r, c] > threshold)
    check = word & ((1 << CHECK_BITS) - 1)
    payload = word >> CHECK_BITS
    if _check(payload) != check:
        return "check bits do not match (code damaged or absent)"
    return FrameCode(frame_index=payload >> CAMERA_ID_BITS, camera_id=payload & MAX_CAMERA_ID)


def read_frame_code(image: np.ndarray) -> FrameCode:
    """Read the frame index and camera id drawn by :func:`draw_frame_code`.

    Accepts an RGB ``(H, W, 3)`` or luma ``(H, W)`` array, in any of the four 90-degree orientations.
    Raises :class:`FrameCodeError` when no orientation holds a readable code (e.g. an all-black frame).
    """
    if image.ndim not in (2, 3):
        raise FrameCodeError(f"image must have shape (H, W) or (H, W, C); got {image.shape}")
    reasons = []
    for quarter_turns in range(4):
        found = _decode(np.rot90(image, quarter_turns))
        if isinstance(found, FrameCode):
            return found
        reasons.append(found)
    height, width = image.shape[:2]
    raise FrameCodeError(
        f"no frame code readable in a {width}x{height} frame (tried 4 orientations): {reasons[0]}"
    )


def read_frame_index(rgb: np.ndarray) -> int:
    """The frame index drawn into ``rgb`` (see :func:`read_frame_code`)."""
    return read_frame_code(rgb).frame_index
