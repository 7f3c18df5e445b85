"""The codec-independent face of :mod:`.h264` and :mod:`.h265`: an access unit's picture type and
reference flag, and its frame letter, whatever the output codec."""

from __future__ import annotations

from pipeline.transcode import h264, h265
from pipeline.transcode.h264 import AccessUnitInfo, frame_letter

CODECS = ("h264", "h265")


def unit_info(codec: str, data: bytes) -> AccessUnitInfo:
    """The :class:`AccessUnitInfo` of an Annex B ``h264`` or ``h265`` access unit.

    Raises ``ValueError`` for another codec, a unit without a slice or a header cut short."""
    if codec == "h265":
        return h265.access_unit_info(data)
    if codec != "h264":
        raise ValueError(f"codec {codec!r}; allowed: {', '.join(CODECS)}")
    return h264.access_unit_info(data)


def unit_letter(codec: str, data: bytes) -> str:
    """The frame letter (``I``, ``i``, ``P``, ``B``, ``b``) of an access unit."""
    return frame_letter(unit_info(codec, data))
