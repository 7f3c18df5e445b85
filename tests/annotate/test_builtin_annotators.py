"""Built-in annotators and the model adapter on real media (synthetic clips and logs, real H.264)."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
from mcap.writer import Writer

from pipeline.annotate import AnnotatorError, EpisodeSource, annotator_class, build_annotators
from pipeline.annotate.imageops import area_resize, hamming, phash
from pipeline.dedup import DedupParams, video_match
from pipeline.enums import SourceKind
from pipeline.errors import ConfigError, UnknownChoiceError
from pipeline.media.x264 import X264_DETERMINISTIC_PARAMS, X264_THREADS
from pipeline.synth.video import ClipMedia, ClipSpec, ClipTweaks, write_clip


def _clip(
    path: Path, seed: int = 1, cuts: int = 2, seconds: float = 3.0, black: bool = False
) -> tuple[Path, tuple[int, ...]]:
    result = write_clip(
        path,
        ClipSpec(path.stem, path.name, seconds, seed=seed, scene_cuts=cuts),
        ClipMedia(),
        ClipTweaks(all_black=black),
    )
    return path, result.scene_cut_frames


def _video(path: Path) -> EpisodeSource:
    return EpisodeSource(episode_id=1, kind=SourceKind.VIDEO, path=path, sha256="0" * 64)


def test_scene_stats_finds_the_synthetic_cuts(tmp_path: Path) -> None:
    path, cuts = _clip(tmp_path / "a.mp4", cuts=2)
    assert len(cuts) == 2
    values = annotator_class("scene_stats")("1").annotate(_video(path))
    assert values["scene_stats.cut_frames"] == list(cuts)
    assert values["scene_stats.scene_count"] == 3


def test_motion_and_image_stats_tell_black_from_textured(tmp_path: Path) -> None:
    textured, _ = _clip(tmp_path / "t.mp4", cuts=0, seconds=1.0)
    black, _ = _clip(tmp_path / "b.mp4", cuts=0, seconds=1.0, black=True)
    motion = annotator_class("motion_energy")("1")
    stats = annotator_class("image_stats")("1")
    m_t, m_b = motion.annotate(_video(textured)), motion.annotate(_video(black))
    s_t, s_b = stats.annotate(_video(textured)), stats.annotate(_video(black))
    assert m_t["motion_energy.mean"] > 1.0 and m_b["motion_energy.mean"] < 0.5
    assert m_b["motion_energy.still_fraction"] == 1.0 and m_t["motion_energy.still_fraction"] < 0.5
    assert s_b["image_stats.underexposed_fraction"] == 1.0
    assert s_b["quality_visual"] == 0.0 < s_t["quality_visual"]


def test_phash_survives_reencoding_and_separates_content(tmp_path: Path) -> None:
    a, _ = _clip(tmp_path / "a.mp4", seed=1, cuts=0, seconds=1.0)
    b, _ = _clip(tmp_path / "b.mp4", seed=2, cuts=0, seconds=1.0)
    smaller = tmp_path / "a_small.mp4"
    with av.open(str(a)) as src, av.open(str(smaller), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 224, 168, "yuv420p"
        stream.options = {"crf": "35", "g": "7", "x264-params": ":".join(X264_DETERMINISTIC_PARAMS)}
        stream.codec_context.thread_count = X264_THREADS
        for frame in src.decode(video=0):
            scaled = frame.reformat(width=224, height=168, format="yuv420p")
            scaled.pts = None
            out.mux(stream.encode(scaled))
        out.mux(stream.encode(None))
    luma = {k: _video(p).frames().luma for k, p in {"a": a, "s": smaller, "b": b}.items()}
    same = [hamming(phash(x), phash(y)) for x, y in zip(luma["a"], luma["s"], strict=True)]
    different = [hamming(phash(x), phash(y)) for x, y in zip(luma["a"], luma["b"], strict=True)]
    # Frame by frame the synthetic scenes (which share the frame-code overlay) come as close as 6 bits, and a
    # re-encoded frame can drift as far (a CI run once saw 6 of 64 bits, when the clip and this re-encode
    # still depended on stale heap bytes: pipeline.media.x264), so grouping decides on most frames, not one.
    assert float(np.median(same)) <= 2 and float(np.median(different)) >= 10
    params = DedupParams()
    hashes = {k: [phash(f) for f in v] for k, v in luma.items()}
    assert video_match(hashes["a"], hashes["s"], params)
    assert not video_match(hashes["a"], hashes["b"], params)


def test_area_resize_keeps_the_mean() -> None:
    image = np.random.default_rng(0).integers(0, 256, (97, 131)).astype(np.uint8)
    small = area_resize(image, 32, 32)
    assert small.shape == (32, 32)
    assert abs(small.mean() - image.mean()) < 1.0
    with pytest.raises(ValueError, match="cannot shrink"):
        area_resize(image, 200, 10)


def _state_log(path: Path, grippers: list[float], velocities: list[float]) -> Path:
    with open(path, "wb") as fh:
        writer = Writer(fh)
        writer.start()
        schema = writer.register_schema("sluice.JointState", "jsonschema", b"{}")
        channel = writer.register_channel("/robot/joint_states", "json", schema)
        for i, (g, v) in enumerate(zip(grippers, velocities, strict=True)):
            stamp = 1_000_000_000 + i * 10_000_000  # 100 Hz
            payload = {"stamp_ns": stamp, "position": [0.0] * 7, "velocity": [v] * 7, "gripper": g}
            writer.add_message(channel, log_time=stamp, publish_time=stamp, data=json.dumps(payload).encode())
        writer.add_metadata("episode", {"task": "  Put the Cup   in the sink. "})
        writer.finish()
    return path


def test_gripper_events_and_idle_spans(tmp_path: Path) -> None:
    # 3 s at 100 Hz: open, closed from 1.0 s, open again from 2.0 s; the arm rests between 0.5 s and 1.5 s
    grippers = [1.0] * 100 + [0.0] * 100 + [1.0] * 100
    velocities = [0.5] * 50 + [0.0] * 101 + [0.5] * 149
    path = _state_log(tmp_path / "s.mcap", grippers, velocities)
    source = EpisodeSource(1, SourceKind.MCAP, path, "0" * 64, state_topic="/robot/joint_states")
    values = annotator_class("gripper_events")("1").annotate(source)
    assert values["gripper_events.events"] == [{"t_s": 1.0, "kind": "close"}, {"t_s": 2.0, "kind": "open"}]
    assert values["gripper_events.idle_spans_s"] == [[0.5, 1.5]]
    assert values["quality_motion"] == pytest.approx(1 - 1.0 / 2.99, abs=1e-3)
    task = annotator_class("task_text")("1").annotate(source)
    assert task == {
        "task_text.task": "Put the Cup   in the sink.",
        "task_text.normalised": "put the cup in the sink",
    }


def _model(path: Path, h: int = 8, w: int = 8) -> Path:
    # "bright" wins when mean luma (in [0, 1]) exceeds 0.3: logit = 10 * mean - 3 against 0 for "dark".
    weights = np.stack([np.zeros(h * w), np.full(h * w, 10.0 / (h * w))])
    np.savez(
        path,
        weights=weights,
        bias=np.array([0.0, -3.0]),
        labels=np.array(["dark", "bright"]),
        input_hw=np.array([h, w]),
    )
    return path


def test_model_backed_annotator_loads_a_local_model(tmp_path: Path) -> None:
    model = _model(tmp_path / "tiny.npz")
    textured, _ = _clip(tmp_path / "t.mp4", cuts=0, seconds=1.0)
    black, _ = _clip(tmp_path / "b.mp4", cuts=0, seconds=1.0, black=True)
    annotator = build_annotators(
        {
            "annotators": {
                "frame_classifier": {"version": "1", "params": {"model_path": str(model), "gpus": 0.5}}
            }
        }
    )[0]
    annotator.setup()
    assert annotator.resources.gpus == 0.5
    bright = annotator.annotate(_video(textured))
    dark = annotator.annotate(_video(black))
    assert bright["frame_classifier.label"] == "bright" and dark["frame_classifier.label"] == "dark"
    assert dark["frame_classifier.confidence"] > 0.9
    assert len(bright["frame_classifier.model_sha256"]) == 64


def test_model_and_registry_errors_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.npz"
    np.savez(
        bad,
        weights=np.zeros((2, 5)),
        bias=np.zeros(2),
        labels=np.array(["a", "b"]),
        input_hw=np.array([8, 8]),
    )
    annotator = annotator_class("frame_classifier")("1", {"model_path": str(bad)})
    with pytest.raises(AnnotatorError, match=r"bad.npz.*expected \(2, 64\)"):
        annotator.setup()
    with pytest.raises(UnknownChoiceError, match=r"allowed: .*motion_energy"):
        annotator_class("no_such_annotator")
    with pytest.raises(ConfigError, match=r"params\.cut_threshold"):
        annotator_class("scene_stats")("1", {"cut_threshold": 5})
