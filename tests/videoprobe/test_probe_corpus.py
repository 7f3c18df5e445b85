"""Every real file of ../shared/corpus/video gets the outcome the corpus README describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.enums import REASON_SEVERITY, ReasonCode
from pipeline.videoprobe import VideoProbe, probe_videos

R = ReasonCode
PLAYABLE = ("sample_simple.mp4", "sample_video_only.mp4", "sample_without_stss.mp4")
BROKEN = {
    "sample_with_invalid_nalu.mp4": R.DECODE_ERROR,
    "invalid-bitstream.webm": R.DECODE_ERROR,
    "sample_malformed_free_box.mp4": R.CONTAINER_ERROR,
}
ROTATED = {"sample_rotate_and_reflect.mp4": -90, "internal_emulator_transformer_output_180_rotated.mp4": 180}
NO_VIDEO = ("sample_audio_only.mp4", "large_stbl_truncated_after_moov.m4b")
# sample_missing_stsd.mp4 is malformed by the MP4 spec, yet FFmpeg decodes it: what it makes of the file is a
# property of the decoder. Outcomes observed per libavcodec version: (decoded frames, finding codes).
MISSING_STSD_BY_LIBAVCODEC: dict[str, tuple[int, list[ReasonCode]]] = {
    "62.28.102": (30, []),  # FFmpeg 8.1.2 / PyAV 18.1.0
}
EXPECTED_FILES = {
    *PLAYABLE,
    *BROKEN,
    *ROTATED,
    *NO_VIDEO,
    "sample_edit_list_no_sync_frame_before_edit.mp4",
    "silent-black-10s.mp4",
    "sample_missing_stsd.mp4",
}


@pytest.fixture(scope="module")
def probes(corpus_dir: Path) -> dict[str, VideoProbe]:
    files = sorted((corpus_dir / "video").iterdir())
    results = probe_videos(files, root=corpus_dir, workers=2)
    return {path.name: probe for path, probe in zip(files, results, strict=True)}


def test_every_corpus_file_has_an_expected_outcome(probes: dict[str, VideoProbe]) -> None:
    assert set(probes) == EXPECTED_FILES


@pytest.mark.parametrize("name", PLAYABLE)
def test_playable_h264_is_accepted_clean(probes: dict[str, VideoProbe], name: str) -> None:
    probe = probes[name]
    assert probe.findings == []
    assert probe.codec == "h264"
    assert probe.decoded_frames == probe.header_frames == 30
    assert probe.leading_keyframe is True
    assert probe.fps_avg == pytest.approx(30000 / 1001)
    assert probe.variable_frame_rate is False


@pytest.mark.parametrize(("name", "code"), BROKEN.items())
def test_broken_files_are_quarantined_for_decode_or_container(
    probes: dict[str, VideoProbe], name: str, code: ReasonCode
) -> None:
    probe = probes[name]
    assert code in probe.codes
    assert probe.quarantined
    assert probe.finding(code).detail  # type: ignore[union-attr]


def test_invalid_nalu_loses_exactly_the_bad_packet(probes: dict[str, VideoProbe]) -> None:
    probe = probes["sample_with_invalid_nalu.mp4"]
    assert (probe.packets, probe.decoded_frames, probe.decode_errors) == (30, 29, 1)
    # The gap the lost frame leaves is a dropped frame, not a variable frame rate.
    assert probe.timing is not None and probe.timing.dropped_frame_gaps == 1
    assert R.VARIABLE_FRAME_RATE not in probe.codes


def test_edit_list_without_leading_sync_frame_is_flagged(probes: dict[str, VideoProbe]) -> None:
    probe = probes["sample_edit_list_no_sync_frame_before_edit.mp4"]
    assert R.MISSING_LEADING_KEYFRAME in probe.codes
    assert probe.leading_keyframe is False
    assert probe.discarded_packets > 0
    # Flagged, or quarantined only because too few frames decode.
    assert probe.quarantined == (R.TOO_FEW_FRAMES in probe.codes)


@pytest.mark.parametrize(("name", "degrees"), ROTATED.items())
def test_display_rotation_is_flagged_with_its_angle(
    probes: dict[str, VideoProbe], name: str, degrees: int
) -> None:
    probe = probes[name]
    assert R.ROTATED in probe.codes
    assert probe.rotation_deg == degrees
    assert not probe.quarantined


def test_reflection_is_told_apart_from_rotation(probes: dict[str, VideoProbe]) -> None:
    assert probes["sample_rotate_and_reflect.mp4"].reflected is True
    assert probes["internal_emulator_transformer_output_180_rotated.mp4"].reflected is False


def test_all_black_video_is_quarantined_as_blank(probes: dict[str, VideoProbe]) -> None:
    probe = probes["silent-black-10s.mp4"]
    assert probe.codes == [R.BLANK_VIDEO]
    assert probe.decoded_frames == 300
    assert probe.blank_ratio == 1.0


@pytest.mark.parametrize("name", NO_VIDEO)
def test_files_without_video_are_quarantined(probes: dict[str, VideoProbe], name: str) -> None:
    probe = probes[name]
    assert {R.NO_VIDEO_STREAM, R.CONTAINER_ERROR} & set(probe.codes)
    assert probe.quarantined
    assert probe.decoded_frames == 0


def test_missing_stsd_outcome_is_tied_to_the_decoder_version(probes: dict[str, VideoProbe]) -> None:
    probe = probes["sample_missing_stsd.mp4"]
    assert probe.decoder is not None
    observed = (probe.decoded_frames, probe.codes)
    expected = MISSING_STSD_BY_LIBAVCODEC.get(probe.decoder.libavcodec)
    if expected is None:
        pytest.fail(f"unrecorded decoder {probe.decoder.label}: it makes {observed} of this file; record it")
    assert observed == expected


def test_results_are_json_round_trippable_and_carry_the_decoder(probes: dict[str, VideoProbe]) -> None:
    for name, probe in probes.items():
        assert VideoProbe.model_validate_json(probe.model_dump_json()) == probe, name
        assert probe.decoder is not None and probe.decoder.libavcodec, name
        assert probe.probe_timing is not None and probe.probe_timing.probe_s > 0, name
        for finding in probe.findings:
            assert finding.severity is REASON_SEVERITY[finding.code], name
