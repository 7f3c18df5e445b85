"""Small numpy image operations the built-in annotators share: area resize, DCT pHash, sharpness.

Everything works on 2-D uint8 luma arrays. The perceptual hash is the classic DCT hash: shrink the frame to
32x32 by area averaging, take the 2-D DCT-II, keep the 8x8 lowest frequencies and set one bit per
coefficient above their median. Re-encoding, rescaling and mild colour shifts move few of the 64 bits;
different content moves about half of them.
"""

from __future__ import annotations

import functools

import numpy as np

#: The frame is shrunk to this square before the DCT (the classic pHash size).
PHASH_INPUT_PX = 32
#: Low-frequency block kept from the DCT: 8x8 = 64 bits, one Python int per frame.
PHASH_BLOCK = 8
PHASH_BITS = PHASH_BLOCK * PHASH_BLOCK


def area_resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``image`` (2-D) shrunk to ``height`` x ``width`` by averaging the pixels that fall in each cell.

    Cells are the integer partition of the source rows and columns, so every source pixel counts exactly
    once; a target larger than the source is refused (this is for shrinking only).
    """
    src_h, src_w = image.shape
    if height > src_h or width > src_w or height < 1 or width < 1:
        raise ValueError(f"cannot shrink {src_w}x{src_h} to {width}x{height}; allowed: 1 <= target <= source")
    rows = np.linspace(0, src_h, height + 1).astype(np.int64)[:-1]
    cols = np.linspace(0, src_w, width + 1).astype(np.int64)[:-1]
    summed = np.add.reduceat(np.add.reduceat(image.astype(np.float64), rows, axis=0), cols, axis=1)
    counts = np.outer(np.diff(np.append(rows, src_h)), np.diff(np.append(cols, src_w)))
    return summed / counts


@functools.cache
def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix: ``C @ x`` is the DCT of the column vector ``x``."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    matrix = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    matrix[0] /= np.sqrt(2.0)
    return matrix


def phash(image: np.ndarray) -> int:
    """The 64-bit DCT perceptual hash of a luma frame, as a Python int (bit 63 = first coefficient)."""
    small = area_resize(image, PHASH_INPUT_PX, PHASH_INPUT_PX)
    c = _dct_matrix(PHASH_INPUT_PX)
    low = (c @ small @ c.T)[:PHASH_BLOCK, :PHASH_BLOCK].reshape(-1)
    bits = low > np.median(low)
    value = 0
    for bit in bits.tolist():
        value = (value << 1) | int(bit)
    return value


def hamming(a: int, b: int) -> int:
    """Bits that differ between two hashes."""
    return (a ^ b).bit_count()


def laplacian_variance(image: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian: a sharpness measure (blurred frames score low)."""
    f = image.astype(np.float32)
    lap = f[1:-1, :-2] + f[1:-1, 2:] + f[:-2, 1:-1] + f[2:, 1:-1] - 4.0 * f[1:-1, 1:-1]
    return float(lap.var())


def luma_histogram(image: np.ndarray, bins: int = 32) -> np.ndarray:
    """Normalised luma histogram (sums to 1)."""
    hist = np.bincount((image.reshape(-1) >> (8 - int(np.log2(bins)))).astype(np.int64), minlength=bins)
    return hist / max(1, image.size)
