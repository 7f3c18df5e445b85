"""Choose the container family from a file's first bytes, so FFmpeg never probes with every demuxer.

FFmpeg's own probing would happily pick the HLS or concat demuxer for a text playlist and then open the
files it references; naming the demuxer explicitly (plus ``format_whitelist`` in the worker) rules that out.
"""

from __future__ import annotations

from pipeline.videoprobe.config import ContainerFamily

SNIFF_BYTES = 64

# ISO-BMFF / QuickTime top-level box types that may start a file. "free"/"skip"/"wide" pad before the real
# boxes; "pnot" is an old QuickTime preview atom.
_MOV_FIRST_BOXES = frozenset(
    {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"uuid", b"styp"}
)
_EBML_MAGIC = b"\x1a\x45\xdf\xa3"

# Only for a readable refusal message: formats that are known but not allowed.
_KNOWN_OTHERS: tuple[tuple[bytes, str], ...] = (
    (b"#EXTM3U", "HLS/M3U playlist"),
    (b"ffconcat", "FFmpeg concat script"),
    (b"RIFF", "RIFF (AVI/WAV)"),
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"OggS", "Ogg"),
    (b"FLV", "FLV"),
    (b"\x00\x00\x00\x01", "raw Annex B elementary stream"),
    (b"\x89MCAP", "MCAP log"),
    (b"<?xml", "XML (DASH manifest?)"),
    (b"[playlist]", "PLS playlist"),
)


def sniff_container(head: bytes) -> ContainerFamily | None:
    """The container family whose signature ``head`` (the first bytes of a file) carries, else ``None``."""
    if len(head) >= 8 and head[4:8] in _MOV_FIRST_BOXES:
        return "mov"
    if head.startswith(_EBML_MAGIC):
        return "matroska"
    return None


def describe_head(head: bytes) -> str:
    """A short human description of an unrecognised file start, for a refusal detail."""
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    for magic, name in _KNOWN_OTHERS:
        if stripped.startswith(magic):
            return name
    if head[:1] == b"\x47" and len(head) >= 1:
        return "possibly MPEG-TS"
    return f"unrecognised bytes {head[:8].hex(' ')}"
