"""Clean vendor clips: real H.264 in MP4, the frame index drawn in at the right time, real scene cuts."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from synth_helpers import decode_clip

from pipeline.media.framecode import read_frame_code
from pipeline.synth import VideoDropConfig, make_video_drop
from pipeline.synth.drop import sha256_file
from pipeline.synth.video import ClipMedia, ClipSpec, write_clip


def test_clean_clip_is_h264_mp4_with_indices_at_their_timestamps(video_drop) -> None:
    root, manifest = video_drop
    for made in manifest.by_defect(None):
        path = root / made.path
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            assert container.format.name.startswith("mov,mp4")
            assert (stream.codec_context.name, stream.width, stream.height) == ("h264", 128, 96)
            assert stream.average_rate == 30
        frames, errors = decode_clip(path)
        assert errors == 0 and len(frames) == made.frames == 60
        codes = [read_frame_code(f.to_ndarray(format="rgb24")) for f in frames]
        assert [c.frame_index for c in codes] == list(range(60))
        # The index drawn into each frame matches its presentation time.
        assert [round(float(f.time) * 30) for f in frames] == [c.frame_index for c in codes]


def test_scene_cuts_are_real_cuts(video_drop) -> None:
    root, manifest = video_drop
    made = manifest.by_defect(None)[0]
    cuts = made.details["scene_cut_frames"]
    assert len(cuts) == 2
    frames, _ = decode_clip(root / made.path)
    # Compare the part of the frame outside the code (the code changes every frame by design).
    lumas = [f.to_ndarray(format="gray")[48:, :].astype(np.int16) for f in frames]
    diffs = np.array([np.abs(b - a).mean() for a, b in itertools.pairwise(lumas)])
    at_cuts = diffs[[c - 1 for c in cuts]]
    elsewhere = np.delete(diffs, [c - 1 for c in cuts])
    assert at_cuts.min() > 3 * np.median(elsewhere)
    assert np.median(elsewhere) > 0  # there is motion and grain between cuts


def test_sidecars_beside_each_clip(video_drop) -> None:
    root, manifest = video_drop
    sidecars = sorted(p.relative_to(root).as_posix() for p in root.glob("**/*.meta.json"))
    assert sidecars == sorted(manifest.extra_files)
    assert len(sidecars) == len(manifest.files)
    meta = json.loads((root / sidecars[0]).read_text())
    assert meta["clip_id"] == Path(sidecars[0]).name.removesuffix(".meta.json")
    assert {"camera", "captured_at", "fps", "width", "height", "duration_s"} <= set(meta)
    # drop.json is not a sidecar: a vendor glob for sidecars never matches the oracle.
    assert "drop.json" not in {Path(s).name for s in sidecars}


def test_ntsc_rate_and_determinism(tmp_path: Path) -> None:
    spec = ClipSpec(clip_id="c", relpath="c.mp4", seconds=0.5, seed=9, scene_cuts=1)
    media = ClipMedia(width=64, height=48, fps=Fraction(30000, 1001))
    write_clip(tmp_path / "a.mp4", spec, media)
    write_clip(tmp_path / "b.mp4", spec, media)
    assert (tmp_path / "a.mp4").read_bytes() == (tmp_path / "b.mp4").read_bytes()
    with av.open(str(tmp_path / "a.mp4")) as container:
        assert container.streams.video[0].average_rate == Fraction(30000, 1001)


def test_video_drop_same_seed_same_bytes(tmp_path: Path) -> None:
    config = VideoDropConfig(
        clips=1, seconds=0.5, width=64, height=48, defects=("rotated", "corrupt_bitstream")
    )
    make_video_drop(tmp_path / "a", config)
    make_video_drop(tmp_path / "b", config)
    hashes = [
        {p.relative_to(d).as_posix(): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file()}
        for d in (tmp_path / "a", tmp_path / "b")
    ]
    assert hashes[0] == hashes[1] and len(hashes[0]) == 7  # 3 clips, 3 sidecars, drop.json
