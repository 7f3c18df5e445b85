"""The quality bank's scorers on clips whose answer is known: each planted defect moves its own score.

The clips are built here (:mod:`planted`): a starved re-encode for blockiness, fields woven from two
instants for interlacing, PIL-drawn text, and the one real photograph of a face that ships in an installed
package (Grace Hopper, in matplotlib's sample data).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont
from planted import textured, video_source, weave, write_gray

from pipeline.annotate import annotator_class


def _moving(n: int = 12, step: float = 4.0, h: int = 128, w: int = 160) -> list[np.ndarray]:
    return [textured(h, w, step * t) for t in range(n)]


def test_blockiness_tells_a_starved_encode_from_a_clean_one(tmp_path: Path) -> None:
    frames = _moving(8)
    clean = write_gray(tmp_path / "clean.mp4", frames, crf=18)
    starved = write_gray(tmp_path / "starved.mp4", frames, crf=51)
    scorer = annotator_class("blockiness")("1")
    clean_ratio = scorer.annotate(video_source(clean))["blockiness.ratio"]
    starved_ratio = scorer.annotate(video_source(starved))["blockiness.ratio"]
    assert clean_ratio < 1.3 < 1.7 < starved_ratio
    # The same starved clip measured off its coding grid (4-px blocks) no longer looks blocky: the score
    # reads the grid, not the mere loss of detail.
    off_grid = annotator_class("blockiness")("1", {"block_px": 5}).annotate(video_source(starved))
    assert off_grid["blockiness.ratio"] < 1.3


def test_blockiness_does_not_take_a_tiled_texture_for_coding_blocks(tmp_path: Path) -> None:
    # Content made of 4-pixel tiles (as the synthetic scenes are) steps on the 8-pixel grid too, but at the
    # blocks' middles as much as at their edges; a starved encode of the same content steps at edges only.
    rng = np.random.default_rng(5)
    tiles = rng.uniform(-30, 30, size=(32, 40))
    frames = [
        np.clip(textured(128, 160, 2 * t) + np.kron(tiles, np.ones((4, 4))), 16, 235).astype(np.uint8)
        for t in range(8)
    ]
    scorer = annotator_class("blockiness")("1")
    tiled = scorer.annotate(video_source(write_gray(tmp_path / "tiled.mp4", frames, crf=18)))
    starved = scorer.annotate(video_source(write_gray(tmp_path / "starved.mp4", frames, crf=51)))
    assert tiled["blockiness.ratio"] < 1.3 < 1.5 < starved["blockiness.ratio"]


def test_interlace_finds_woven_fields_and_passes_progressive_frames(tmp_path: Path) -> None:
    progressive = write_gray(tmp_path / "p.mp4", [textured(128, 160, 4 * t) for t in range(16)])
    woven = [weave(textured(128, 160, 8 * t), textured(128, 160, 8 * t + 4)) for t in range(16)]
    interlaced = write_gray(tmp_path / "i.mp4", woven)
    scorer = annotator_class("interlace")("1")
    p = scorer.annotate(video_source(progressive))
    i = scorer.annotate(video_source(interlaced))
    assert i["interlace.interlaced_fraction"] > 0.8 and i["interlace.field_order"] == "tff"
    assert p["interlace.interlaced_fraction"] < 0.1 and p["interlace.field_order"] == "progressive"


def _with_text(image: np.ndarray, text: str) -> np.ndarray:
    canvas = Image.fromarray(image)
    ImageDraw.Draw(canvas).text((12, 90), text, fill=250, font=ImageFont.load_default(size=26))
    return np.asarray(canvas)


def test_text_detector_from_the_wheel_finds_burnt_in_captions(tmp_path: Path) -> None:
    plain = [textured(240, 320, 2 * t) for t in range(6)]
    captioned = [_with_text(f, "SALE 50% OFF") for f in plain]
    scorer = annotator_class("text")("1", {"frames": 2})
    scorer.setup()
    with_text = scorer.annotate(video_source(write_gray(tmp_path / "t.mp4", captioned)))
    without = scorer.annotate(video_source(write_gray(tmp_path / "n.mp4", plain)))
    assert with_text["text.frame_fraction"] == 1.0 and with_text["text.count_max"] >= 1
    assert 0.01 < with_text["text.area_fraction_max"] < 0.3  # one caption line, not the frame
    assert without["text.frame_fraction"] == 0.0


def test_face_detector_from_the_wheel_finds_a_real_face(tmp_path: Path) -> None:
    from matplotlib import cbook

    photo = Image.open(cbook.get_sample_data("grace_hopper.jpg")).convert("L").resize((240, 320))
    face = np.asarray(photo)
    scorer = annotator_class("faces")("1", {"frames": 2})
    found = scorer.annotate(video_source(write_gray(tmp_path / "f.mp4", [face] * 4)))
    empty = scorer.annotate(video_source(write_gray(tmp_path / "e.mp4", _moving(4, h=320, w=240))))
    assert found["faces.frame_fraction"] == 1.0 and found["faces.count_max"] == 1
    assert found["faces.area_fraction_max"] > 0.05
    assert empty["faces.frame_fraction"] == 0.0


@pytest.mark.parametrize("name", ["blockiness", "interlace", "text", "faces"])
def test_scorer_params_are_validated(name: str) -> None:
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=f"annotate.annotators.{name}.params.frames"):
        annotator_class(name)("1", {"frames": 0})


def test_blur_and_exposure_scores_of_image_stats_follow_the_planted_defect(tmp_path: Path) -> None:
    import cv2

    sharp = [
        (
            (textured(128, 160, 2 * t).astype(np.int16) + 40 * ((np.indices((128, 160)).sum(0) // 4) % 2))
            % 256
        ).astype(np.uint8)
        for t in range(4)
    ]
    blurred = [cv2.GaussianBlur(f, (0, 0), 3.0) for f in sharp]
    blown = [np.clip(f.astype(np.int16) + 120, 0, 255).astype(np.uint8) for f in sharp]
    stats = annotator_class("image_stats")("1")
    s = stats.annotate(video_source(write_gray(tmp_path / "s.mp4", sharp)))
    b = stats.annotate(video_source(write_gray(tmp_path / "b.mp4", blurred)))
    o = stats.annotate(video_source(write_gray(tmp_path / "o.mp4", blown)))
    assert b["image_stats.blur_laplacian_var_median"] < 0.2 * s["image_stats.blur_laplacian_var_median"]
    assert b["quality_visual"] < s["quality_visual"]
    assert o["image_stats.overexposed_fraction"] > 0.3 > s["image_stats.overexposed_fraction"]
