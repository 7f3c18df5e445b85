"""From a training profile (:class:`~pipeline.config.TranscodeOptions`) to encoder settings (libx264 for
``codec: h264``, libx265 for ``codec: h265``) and the GOP it must produce.

* ``vla`` / ``world_model``: closed GOPs of ``gop_frames`` frames, an IDR then P-frames only (Foxglove
  cannot show B-frames), every frame a reference: a frame depends on every frame before it in its GOP.
* ``random_access``: the DDRA layout (dependency-decoupled random access): intra anchors every
  ``gop_frames`` frames, shared by the intervals on both sides (an open GOP: the anchor after the first is a
  non-IDR I-frame, an HEVC CRA), and ``gop_frames - 1`` non-reference B-frames between two anchors, each
  predicted only from those two. ``b-adapt=0`` fixes the pattern, no B-pyramid keeps the B-frames
  non-reference, ``ref=1`` gives each B one anchor per direction, no weighted bi-prediction. A request of K
  frames inside one interval costs K + 2 decodes; neighbouring intervals share an anchor. Both encoders
  cap a B-frame run at 16, so anchors are at most 17 frames apart. When the stream does not end on an
  anchor, the last frame is a P anchor predicted from the last I-frame (the encoder needs a frame after the
  last B-frames). The profile is tuned for PSNR (no psycho-visual optimisation, no adaptive quantisation):
  it is compared with other layouts at equal PSNR, and psy-rd spends bits on texture that PSNR counts as
  error.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from pipeline.config import TrainingProfile, TranscodeOptions
from pipeline.media.x264 import X264_DETERMINISTIC_PARAMS, x265_deterministic_params

#: PyAV encoder and decoder names, and the ``foxglove.CompressedVideo`` format, per output codec.
ENCODERS = {"h264": "libx264", "h265": "libx265"}
DECODERS = {"h264": "h264", "h265": "hevc"}
FOXGLOVE_FORMATS = {"h264": "h264", "h265": "h265"}


@dataclass(frozen=True)
class EncoderSettings:
    """Everything the encoder is told, resolved from the profile; picklable for encoder processes."""

    profile: TrainingProfile
    gop_frames: int
    bframes: int
    preset: str
    crf: int | float | None
    qp: int | None
    max_pixels: int
    entropy_coder: str = "cabac"
    codec: str = "h264"

    @classmethod
    def from_options(cls, options: TranscodeOptions) -> EncoderSettings:
        return cls(
            profile=options.profile,
            gop_frames=options.gop_frames,
            bframes=options.bframes,
            preset=options.preset,
            crf=options.crf,
            qp=options.qp,
            max_pixels=options.max_pixels,
            entropy_coder=options.entropy_coder,
            codec=options.codec,
        )

    @property
    def decoupled(self) -> bool:
        """True for the dependency-decoupled (shared intra anchors, non-reference B-frame) layout."""
        return self.profile is TrainingProfile.RANDOM_ACCESS

    @property
    def encoder_name(self) -> str:
        return ENCODERS[self.codec]

    @property
    def decoder_name(self) -> str:
        return DECODERS[self.codec]

    def params(self) -> str:
        """The ``x264-params`` or ``x265-params`` string."""
        return self._x265_params() if self.codec == "h265" else self._x264_params()

    def _x264_params(self) -> str:
        params = [
            f"keyint={self.gop_frames}",
            f"min-keyint={self.gop_frames}",
            # A keyframe every gop_frames exactly, never where x264 sees a scene cut: the GOP audit and the
            # sample reader rely on the fixed interval.
            "scenecut=0",
            f"bframes={self.bframes}",
            # always explicit: presets differ (ultrafast turns CABAC off), the profile decides
            f"cabac={int(self.entropy_coder == 'cabac')}",
            # byte-identical reruns (the macroblock tree would otherwise read stale heap bytes)
            *X264_DETERMINISTIC_PARAMS,
        ]
        if self.decoupled:
            params += [
                "open-gop=1",
                "b-adapt=0",
                "b-pyramid=none",
                "ref=1",
                "weightb=0",
                "psy=0",
                "aq-mode=0",
            ]
        return ":".join(params)

    def _x265_params(self) -> str:
        params = [
            f"keyint={self.gop_frames}",
            f"min-keyint={self.gop_frames}",
            "scenecut=0",
            f"bframes={self.bframes}",
            # x265 refuses a lookahead shorter than a B-frame run; its presets go as low as 5
            f"rc-lookahead={max(20, self.bframes + 2)}",
            # headers before every keyframe: a reader may start at any of them (x264 does it by default)
            "repeat-headers=1",
            *x265_deterministic_params(self.bframes),
        ]
        if self.decoupled:
            params += [
                "open-gop=1",
                "b-adapt=0",
                "b-pyramid=0",
                "ref=1",
                "weightb=0",
                "psy-rd=0",
                "psy-rdoq=0",
                "aq-mode=0",
            ]
        else:
            params.append("open-gop=0")
        return ":".join(params)

    def encoder_options(self) -> dict[str, str]:
        """The ``options`` of PyAV's libx264 or libx265 encoder."""
        key = "x265-params" if self.codec == "h265" else "x264-params"
        options = {"preset": self.preset, key: self.params()}
        if self.qp is not None:
            options["qp"] = str(self.qp)
        else:
            options["crf"] = f"{self.crf:g}"
        return options

    def describe(self) -> dict[str, str]:
        """String map for the episode's metadata record."""
        return {
            "profile": self.profile.value,
            "codec": self.codec,
            "gop_frames": str(self.gop_frames),
            "bframes": str(self.bframes),
            "preset": self.preset,
            "rate_control": f"qp {self.qp}" if self.qp is not None else f"crf {self.crf:g}",
            f"{self.encoder_name.removeprefix('lib')}_params": self.params(),
        }


def fit_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The output size: the input size scaled down (aspect kept) until it has at most ``max_pixels``,
    both sides even (yuv420p halves them)."""
    if width * height > max_pixels:
        scale = (max_pixels / (width * height)) ** 0.5
        width, height = int(width * scale), int(height * scale)
    return max(2, width - width % 2), max(2, height - height % 2)


def expected_letters(frames: int, settings: EncoderSettings) -> str:
    """The frame letters (see :func:`pipeline.transcode.h264.frame_letter`) the profile must produce, in
    display order, for a stream of ``frames`` frames."""
    g = settings.gop_frames
    if settings.decoupled:
        # I, then for every interval gop_frames - 1 B-frames and an intra anchor; a stream that does not
        # end on an anchor ends on a P anchor (see the module docstring)
        letters = ["b"] * frames
        for k in range(0, frames, g):
            letters[k] = "I" if k == 0 else "i"
        if frames > 1 and (frames - 1) % g:
            letters[-1] = "P"
        return "".join(letters)
    out = []
    for start in range(0, frames, g):
        size = min(g, frames - start)
        out.append("I" + "P" * (size - 1))
    return "".join(out)


def frame_rate(rate_hz: float) -> Fraction:
    """A camera rate as a fraction (29.97 and the like become n/1001)."""
    return Fraction(rate_hz).limit_denominator(1001)
