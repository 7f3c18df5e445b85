"""The VLM captioner on a tiny image-to-text model this test builds from configs with seeded random weights
(ViT encoder + GPT-2 decoder, a word-level tokenizer, a ViT image processor), saved with save_pretrained.

The model tests need the `vlm` extra (transformers, torch) and run under `make test-vlm`; in the project's
venv they skip, and the tests of what happens without the extra run instead.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from planted import textured, video_source, write_gray
from sluice_world import World, batch_items, land, vendor_from_example
from sqlalchemy import select

from pipeline.annotate import annotator_class
from pipeline.annotate.caption import RESERVED_BYTES, caption_batch_size
from pipeline.annotate.run import run_annotators
from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import Annotation, Artifact, StepRun
from pipeline.enums import ReasonCode
from pipeline.steps.annotate import AnnotateStep
from pipeline.steps.base import Resources
from pipeline.steps.runner import run_step
from pipeline.synth import RobotDropConfig, make_robot_drop

HAS_VLM = find_spec("transformers") is not None and find_spec("torch") is not None
needs_vlm = pytest.mark.skipif(
    not HAS_VLM, reason="transformers and torch are absent (the `vlm` extra): `make test-vlm` runs these"
)
without_vlm = pytest.mark.skipif(HAS_VLM, reason="the `vlm` extra is installed here")

MIB = 1 << 20
WORDS = ["<pad>", "<s>", "</s>", "<unk>", "a", "robot", "arm", "cup", "red", "table", "picks", "up", "on"]


def build_tiny_captioner(path: Path, seed: int = 0) -> Path:
    """A VisionEncoderDecoder model of a few hundred kB with random weights drawn from ``seed``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        GPT2Config,
        PreTrainedTokenizerFast,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    # Weights ten times wider than the default init, so the random decoder says words instead of
    # repeating its start token.
    encoder = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        initializer_range=0.5,
    )
    decoder = GPT2Config(
        vocab_size=len(WORDS),
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.5,
    )
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
    torch.manual_seed(seed)
    model = VisionEncoderDecoderModel(config=config)
    model.generation_config.decoder_start_token_id = 1
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_captioner(tmp_path_factory.mktemp("captioner") / "tiny-vit-gpt2")


def colour_clip(path: Path, frames: int = 12) -> Path:
    """A moving scene whose three channels differ (the captioner reads colour)."""
    images = [np.stack([textured(96, 128, 3 * t, seed=s) for s in (3, 5, 7)], axis=2) for t in range(frames)]
    return write_gray(path, images)


def captioner(model: Path, memory_bytes: int = 2 << 30, **params: Any) -> Any:
    annotator = annotator_class("caption")("1", {"model_path": str(model), **params})
    annotator.grant(Resources(cpus=1.0, memory_bytes=memory_bytes))
    return annotator


def test_batch_size_is_what_the_memory_holds_beside_the_weights() -> None:
    weights, frame = 100 * MIB, 256 * MIB
    assert caption_batch_size(RESERVED_BYTES + weights + 3 * frame, weights, frame, 8) == 3
    assert caption_batch_size(RESERVED_BYTES + weights + 3 * frame - 1, weights, frame, 8) == 2
    assert caption_batch_size(1 << 30, 2 << 30, frame, 8) == 1  # never below one frame
    assert caption_batch_size(64 << 30, weights, frame, 8) == 8  # never past the clip's frames
    assert caption_batch_size(1 << 40, weights, frame, 1000) == 64


@needs_vlm
def test_captions_real_frames_deterministically(tiny_model: Path, tmp_path: Path) -> None:
    source = video_source(colour_clip(tmp_path / "clip.mp4"))
    first = captioner(tiny_model).annotate(source)
    assert [f["frame"] for f in first["caption.frames"]] == [0, 4, 7, 11]  # the detectors' sampling
    texts = [f["text"] for f in first["caption.frames"]]
    assert all(texts) and {w for t in texts for w in t.split()} <= set(WORDS[3:])
    assert first["caption.text"] == texts[2]
    assert first["caption.model"] == "tiny-vit-gpt2"
    assert first["caption.model_type"] == "vision-encoder-decoder"
    # Loaded anew, and a model rebuilt from the same seed: the same bytes, the same captions.
    again = build_tiny_captioner(tmp_path / "tiny-vit-gpt2")
    second = captioner(again).annotate(video_source(source.path))
    assert second == first
    # Other weights see the same frames differently (the captions come from the model, not a constant).
    other = captioner(build_tiny_captioner(tmp_path / "other" / "tiny-vit-gpt2", seed=1)).annotate(source)
    assert other["caption.model_sha256"] != first["caption.model_sha256"]
    assert other["caption.frames"] != first["caption.frames"]


@needs_vlm
def test_batch_size_follows_the_granted_memory(tiny_model: Path, tmp_path: Path) -> None:
    source = video_source(colour_clip(tmp_path / "clip.mp4", frames=16))
    small = captioner(tiny_model, memory_bytes=RESERVED_BYTES + 300 * MIB, frames=8)
    large = captioner(tiny_model, memory_bytes=RESERVED_BYTES + 1100 * MIB, frames=8)
    forced = captioner(tiny_model, memory_bytes=RESERVED_BYTES + 1100 * MIB, frames=8, batch_size=8)
    results = [a.annotate(source) for a in (small, large, forced)]
    # 256 MiB a frame: 300 MiB beside the tiny weights hold one, 1100 MiB four; a batch_size param wins.
    assert [a.batch_size for a in (small, large, forced)] == [1, 4, 8]
    assert [a.generate_calls for a in (small, large, forced)] == [8, 2, 1]
    assert results[0]["caption.frames"] == results[1]["caption.frames"] == results[2]["caption.frames"]


@needs_vlm
def test_a_hub_id_or_a_bad_directory_is_a_clear_failure(tmp_path: Path) -> None:
    source = video_source(colour_clip(tmp_path / "clip.mp4", frames=4))
    (tmp_path / "empty").mkdir()
    for model_path, said in [
        ("Salesforce/blip-image-captioning-base", "is not a local directory"),
        (str(tmp_path / "empty"), "cannot load an image-to-text model"),
    ]:
        annotator = annotator_class("caption")("1", {"model_path": model_path})
        [outcome] = run_annotators([annotator], source)
        assert not outcome.ok and said in (outcome.error or ""), outcome.error


@without_vlm
def test_without_the_extra_the_captioner_fails_naming_it_and_the_others_run(tmp_path: Path) -> None:
    source = video_source(colour_clip(tmp_path / "clip.mp4", frames=4))
    caption = annotator_class("caption")("1", {"model_path": str(tmp_path)})
    stats = annotator_class("image_stats")("1")
    failed, ran = run_annotators([caption, stats], source)
    assert not failed.ok and ran.ok
    assert failed.error is not None and "`vlm` extra" in failed.error and "\n" not in failed.error
    [again] = run_annotators([caption], source)  # the next episode: the same one line, no new attempt
    assert again.error == failed.error


def _caption_vendor(drop: Path, model: Path, memory: str) -> Any:
    params = {"model_path": str(model), "frames": 4, "memory_bytes": "600 MiB"}
    return vendor_from_example(
        "acme_robotics",
        drop,
        annotate={
            "annotators": {
                "caption": {"version": "3", "params": params},
                "image_stats": {"version": "1"},
            }
        },
        steps={"annotate": {"resources": {"cpus": 1, "memory_bytes": memory}}},
    )


@pytest.mark.integration
@needs_vlm
def test_the_annotate_step_records_captions_with_model_and_config_hash(
    world: World, tiny_model: Path, tmp_path: Path
) -> None:
    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=1, width=64, height=48))
    vendor = _caption_vendor(drop, tiny_model, "1100 MiB")
    episodes = land(world, vendor, drop, "*.mcap")
    step = AnnotateStep(vendor, world.ctx)
    summary = run_step(step, batch_items(drop, "*.mcap"))
    assert (summary.succeeded, summary.failed) == (2, 0)
    [caption] = [a for a in step.annotators if a.name == "caption"]
    # The step's 1100 MiB (above the captioner's own 600 MiB) size the batches: two frames a call.
    assert step.resources.memory_bytes == 1100 * MIB and caption.batch_size == 2
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        rows = session.execute(select(Annotation).where(Annotation.annotator == "caption")).scalars().all()
        by = {(r.episode_id, r.key): r for r in rows}
        for episode_id in episodes.values():
            text = by[(episode_id, "caption.text")]
            assert text.annotator_version == "3" and isinstance(text.value, str) and text.value
            assert by[(episode_id, "caption.model")].value == "tiny-vit-gpt2"
            artifact = session.get(Artifact, text.artifact_id)
            assert artifact is not None and artifact.config_hash == step.config_hash


@pytest.mark.integration
@without_vlm
def test_the_annotate_step_without_the_extra_warns_and_records_the_rest(world: World, tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=1, width=64, height=48))
    vendor = _caption_vendor(drop, tmp_path, "2 GiB")
    [episode_id] = land(world, vendor, drop, "*.mcap").values()
    summary = run_step(AnnotateStep(vendor, world.ctx), batch_items(drop, "*.mcap"))
    assert (summary.succeeded, summary.failed) == (1, 0)
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        [run] = session.execute(select(StepRun).where(StepRun.step == "annotate")).scalars().all()
        assert run.reason == ReasonCode.ANNOTATOR_FAILED.value and "`vlm` extra" in (run.detail or "")
        query = select(Annotation.annotator).where(Annotation.episode_id == episode_id)
        names = set(session.execute(query).scalars())
        assert "image_stats" in names and "caption" not in names
