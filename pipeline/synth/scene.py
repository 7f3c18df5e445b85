"""A cheap procedural scene with motion and grain, rendered straight into yuv420p planes.

The encoder must have real work (texture, a panning background, a moving object, per-frame grain) while
rendering stays far cheaper than encoding: a frame is a window sliced out of a pre-rendered periodic tile
(free), plus one uint8 add of pre-drawn grain, plus a rectangle. Rendering in YUV skips an RGB->YUV
conversion per frame and keeps the bytes independent of the machine's swscale SIMD paths, so a seed gives
the same frames everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline.errors import SluiceError
from pipeline.media.framecode import FrameCode, draw_frame_code, frame_code_region

# Limited-range video levels: what an RGB decoder maps to 0 and 255.
LUMA_BLACK = 16
LUMA_WHITE = 235
CHROMA_NEUTRAL = 128
# Frame sizes must be multiples of this: yuv420p halves both axes, and even pan offsets keep luma and
# chroma aligned.
SIZE_MULTIPLE = 8


class SceneSizeError(SluiceError, ValueError):
    def __init__(self, width: int, height: int) -> None:
        super().__init__(
            f"frame size {width}x{height} not allowed; width and height must be multiples of "
            f"{SIZE_MULTIPLE} and at least 64x48"
        )


def check_frame_size(width: int, height: int) -> None:
    """Raise :class:`SceneSizeError` unless the size can carry a scene and a frame code."""
    if width % SIZE_MULTIPLE or height % SIZE_MULTIPLE or width < 64 or height < 48:
        raise SceneSizeError(width, height)


def yuv420p_buffer(width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One ``(H*3/2, W)`` uint8 array in PyAV's yuv420p layout, and views of its Y, U and V planes."""
    buf = np.empty((height * 3 // 2, width), dtype=np.uint8)
    return (buf, *yuv420p_planes(buf, width, height))


def yuv420p_planes(buf: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of the Y, U and V planes of a ``(H*3/2, W)`` yuv420p array."""
    flat = buf.reshape(-1)
    luma_size = width * height
    y = flat[:luma_size].reshape(height, width)
    u = flat[luma_size : luma_size * 5 // 4].reshape(height // 2, width // 2)
    v = flat[luma_size * 5 // 4 :].reshape(height // 2, width // 2)
    return y, u, v


def stamp_frame_code(buf: np.ndarray, width: int, height: int, code: FrameCode) -> None:
    """Draw ``code`` into a yuv420p frame's corner, with neutral chroma under it (black and white cells
    carry no colour to bleed)."""
    y, u, v = yuv420p_planes(buf, width, height)
    draw_frame_code(y, code.frame_index, code.camera_id, black=LUMA_BLACK, white=LUMA_WHITE)
    code_w, code_h = frame_code_region(width, height)
    cw, ch = (code_w + 1) // 2, (code_h + 1) // 2
    u[:ch, :cw] = CHROMA_NEUTRAL
    v[:ch, :cw] = CHROMA_NEUTRAL


def black_frame(width: int, height: int) -> np.ndarray:
    """An all-black yuv420p frame (limited range), with no frame code."""
    buf, y, u, v = yuv420p_buffer(width, height)
    y[:] = LUMA_BLACK
    u[:] = CHROMA_NEUTRAL
    v[:] = CHROMA_NEUTRAL
    return buf


@dataclass(frozen=True)
class _Tiles:
    """One scene's pre-rendered content: 2x2 tiles of a periodic background, plus its motion."""

    luma: np.ndarray  # (2H, 2W), already lowered by the grain amplitude
    u: np.ndarray  # (H, W)
    v: np.ndarray
    pan_px_per_s: float
    bob_px: float
    bob_hz: float
    object_hz: tuple[float, float]
    object_phase: float
    object_level: tuple[int, int, int]


class SceneGenerator:
    """Renders frame after frame of one camera's view; a new ``scene_id`` is a hard scene cut.

    ``grain`` is the amplitude of per-frame luma noise; ``grain_bank`` noise fields are drawn once and
    cycled, because drawing fresh noise per frame would cost more than the encode it is meant to load.
    """

    def __init__(self, width: int, height: int, seed: int, *, grain: int = 6, grain_bank: int = 8) -> None:
        check_frame_size(width, height)
        self.width = width
        self.height = height
        self.seed = seed
        self.grain = grain
        rng = np.random.default_rng([seed, 0x5CE7E])
        self._noise = rng.integers(0, 2 * grain + 1, size=(grain_bank, height, width), dtype=np.uint8)
        frame_code_region(width, height)  # a size too small for a frame code fails here, not at a render
        self._tile_cache: dict[int, _Tiles] = {}

    def _tiles(self, scene_id: int) -> _Tiles:
        tiles = self._tile_cache.get(scene_id)
        if tiles is None:
            # Scenes are visited in order, so only the current one needs keeping.
            self._tile_cache = {scene_id: self._make_tiles(scene_id)}
            tiles = self._tile_cache[scene_id]
        return tiles

    def _make_tiles(self, scene_id: int) -> _Tiles:
        h, w = self.height, self.width
        rng = np.random.default_rng([self.seed, scene_id, 0xBA5E])
        yy = np.linspace(0.0, 2.0 * np.pi, h, endpoint=False, dtype=np.float32)[:, None]
        xx = np.linspace(0.0, 2.0 * np.pi, w, endpoint=False, dtype=np.float32)[None, :]
        # Integer spatial frequencies keep the background periodic over one frame, so a 2x2 tile can be
        # panned by slicing.
        luma = np.full((h, w), rng.uniform(90, 150), dtype=np.float32)
        for _ in range(3):
            fx, fy = rng.integers(1, 7), rng.integers(0, 5)
            luma += rng.uniform(12, 30) * np.sin(fx * xx + fy * yy + rng.uniform(0, 2 * np.pi))
        # Blocky static texture (4x4 pixel blocks) gives intra frames detail to code.
        coarse = rng.uniform(-14, 14, size=(h // 4, w // 4)).astype(np.float32)
        luma += np.repeat(np.repeat(coarse, 4, axis=0), 4, axis=1)
        chroma = [np.full((h // 2, w // 2), CHROMA_NEUTRAL, dtype=np.float32) for _ in range(2)]
        for plane in chroma:
            fx, fy = rng.integers(1, 4), rng.integers(0, 3)
            plane += rng.uniform(10, 25) * np.sin(fx * xx[:, ::2] + fy * yy[::2] + rng.uniform(0, 2 * np.pi))
        # Objects on the table: flat boxes with their own colour.
        for _ in range(int(rng.integers(4, 8))):
            bh, bw = int(rng.integers(h // 12, h // 4)), int(rng.integers(w // 12, w // 4))
            y0, x0 = int(rng.integers(0, h - bh)) & ~1, int(rng.integers(0, w - bw)) & ~1
            luma[y0 : y0 + bh, x0 : x0 + bw] = rng.uniform(40, 220)
            chroma[0][y0 // 2 : (y0 + bh) // 2, x0 // 2 : (x0 + bw) // 2] = rng.uniform(70, 190)
            chroma[1][y0 // 2 : (y0 + bh) // 2, x0 // 2 : (x0 + bw) // 2] = rng.uniform(70, 190)
        # Lower by the grain amplitude so that adding noise in [0, 2*grain] never wraps a uint8.
        luma = np.clip(luma, LUMA_BLACK + self.grain, LUMA_WHITE - self.grain) - self.grain
        luma_u8 = luma.astype(np.uint8)
        u8 = [np.clip(p, LUMA_BLACK, 240).astype(np.uint8) for p in chroma]
        return _Tiles(
            luma=np.tile(luma_u8, (2, 2)),
            u=np.tile(u8[0], (2, 2)),
            v=np.tile(u8[1], (2, 2)),
            pan_px_per_s=float(rng.uniform(0.08, 0.25) * w * rng.choice([-1, 1])),
            bob_px=float(rng.uniform(0.02, 0.06) * h),
            bob_hz=float(rng.uniform(0.1, 0.3)),
            object_hz=(float(rng.uniform(0.15, 0.5)), float(rng.uniform(0.1, 0.4))),
            object_phase=float(rng.uniform(0, 2 * np.pi)),
            object_level=(
                int(rng.integers(170, 230)),
                int(rng.integers(60, 110)),
                int(rng.integers(150, 200)),
            ),
        )

    def render(
        self,
        t_s: float,
        *,
        grain_index: int = 0,
        scene_id: int = 0,
        code: FrameCode | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The frame at time ``t_s`` as a ``(H*3/2, W)`` yuv420p array (PyAV's layout).

        ``grain_index`` picks the grain field (pass the frame number); ``code`` draws a frame code;
        ``out`` reuses a buffer from :func:`yuv420p_buffer`.
        """
        h, w = self.height, self.width
        tiles = self._tiles(scene_id)
        if out is None:
            out = yuv420p_buffer(w, h)[0]
        y, u, v = yuv420p_planes(out, w, h)
        # Even offsets keep the half-resolution chroma window aligned with the luma window.
        ox = int(tiles.pan_px_per_s * t_s) % w & ~1
        oy = int(tiles.bob_px * (1.0 + math.sin(2.0 * math.pi * tiles.bob_hz * t_s))) % h & ~1
        np.add(tiles.luma[oy : oy + h, ox : ox + w], self._noise[grain_index % len(self._noise)], out=y)
        u[:] = tiles.u[oy // 2 : oy // 2 + h // 2, ox // 2 : ox // 2 + w // 2]
        v[:] = tiles.v[oy // 2 : oy // 2 + h // 2, ox // 2 : ox // 2 + w // 2]
        # The moving object (a gripper crossing the view).
        oh, ow = h // 5 & ~1, w // 7 & ~1
        fx, fy = tiles.object_hz
        cx = w * (0.55 + 0.35 * math.sin(2.0 * math.pi * fx * t_s + tiles.object_phase))
        cy = h * (0.6 + 0.3 * math.sin(2.0 * math.pi * fy * t_s))
        x0 = min(max(int(cx - ow / 2), 0), w - ow) & ~1
        y0 = min(max(int(cy - oh / 2), 0), h - oh) & ~1
        level_y, level_u, level_v = tiles.object_level
        y[y0 : y0 + oh, x0 : x0 + ow] = level_y
        u[y0 // 2 : (y0 + oh) // 2, x0 // 2 : (x0 + ow) // 2] = level_u
        v[y0 // 2 : (y0 + oh) // 2, x0 // 2 : (x0 + ow) // 2] = level_v
        if code is not None:
            stamp_frame_code(out, w, h, code)
        return out
