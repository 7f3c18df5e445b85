"""Just enough of the H.264 bitstream to audit a GOP: NAL unit headers and the first slice's type.

The decoder's ``pict_type`` says what a frame is; the NAL header says whether other frames may reference it
(``nal_ref_idc``), which the dependency-decoupled layout relies on and the decoder does not report.
"""

from __future__ import annotations

from dataclasses import dataclass

NAL_SLICE = 1
NAL_IDR = 5
NAL_SEI = 6
NAL_PPS = 8
SEI_RECOVERY_POINT = 6
_VCL = (NAL_SLICE, NAL_IDR)
#: slice_type % 5 -> picture type letter (SP and SI slices count as P and I).
_SLICE_TYPES = {0: "P", 1: "B", 2: "I", 3: "P", 4: "I"}


@dataclass(frozen=True)
class AccessUnitInfo:
    """What one Annex B access unit holds."""

    picture_type: str  # "I", "P" or "B" (first slice)
    idr: bool
    reference: bool  # nal_ref_idc != 0: later frames may predict from it
    coders: frozenset[str] = (
        frozenset()
    )  # entropy coder of each parameter set before the slice (IDRs carry them)
    # a decoder may start here: an IDR, an HEVC IRAP, or an H.264 I-frame behind a recovery point SEI (an
    # open GOP's anchor)
    random_access: bool = False


def nal_units(data: bytes) -> list[tuple[int, int]]:
    """``(header_offset, end)`` of every NAL unit after a 3- or 4-byte start code."""
    starts = []
    i = data.find(b"\x00\x00\x01")
    while i >= 0:
        starts.append(i + 3)
        i = data.find(b"\x00\x00\x01", i + 3)
    return [(s, (starts[k + 1] - 3) if k + 1 < len(starts) else len(data)) for k, s in enumerate(starts)]


def unescape(payload: bytes) -> bytes:
    return payload.replace(b"\x00\x00\x03", b"\x00\x00")


class BitReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def bit(self) -> int:
        if self._pos >> 3 >= len(self._data):
            raise ValueError("NAL unit ends inside a header field")
        byte = self._data[self._pos >> 3]
        value = (byte >> (7 - (self._pos & 7))) & 1
        self._pos += 1
        return value

    def ue(self) -> int:
        """Unsigned Exp-Golomb code."""
        zeros = 0
        while self.bit() == 0:
            zeros += 1
            if zeros > 31:
                raise ValueError("Exp-Golomb code longer than 32 bits")
        value = 1
        for _ in range(zeros):
            value = (value << 1) | self.bit()
        return value - 1


def access_unit_info(data: bytes) -> AccessUnitInfo:
    """Picture type, IDR flag and reference flag of an Annex B access unit (from its first slice NAL), and
    the entropy coders of the parameter sets in front of it.

    Raises ``ValueError`` when the unit holds no slice or a header it reads is cut short.
    """
    coders = set()
    recovery = False
    for start, end in nal_units(data):
        header = data[start]
        nal_type = header & 0x1F
        if nal_type == NAL_PPS:
            coders.add(_pps_coder(data, start, end))
        if nal_type == NAL_SEI:
            recovery = recovery or SEI_RECOVERY_POINT in _sei_payload_types(data, start, end)
        if nal_type not in _VCL:
            continue
        # first_mb_in_slice and slice_type are the first two Exp-Golomb codes; 16 bytes hold both.
        bits = BitReader(unescape(data[start + 1 : min(end, start + 17)]))
        bits.ue()
        slice_type = bits.ue() % 5
        idr = nal_type == NAL_IDR
        return AccessUnitInfo(
            picture_type=_SLICE_TYPES[slice_type],
            idr=idr,
            reference=((header >> 5) & 0x3) != 0,
            coders=frozenset(coders),
            random_access=idr or (recovery and _SLICE_TYPES[slice_type] == "I"),
        )
    raise ValueError("access unit holds no slice NAL unit")


def _sei_payload_types(data: bytes, start: int, end: int) -> list[int]:
    """The payload types of the SEI messages in one SEI NAL unit (H.264 7.3.2.3)."""
    body = unescape(data[start + 1 : end])
    types, pos = [], 0
    while pos < len(body) and body[pos] != 0x80:  # rbsp_trailing_bits
        kind = size = 0
        while pos < len(body) and body[pos] == 0xFF:
            kind, pos = kind + 255, pos + 1
        if pos >= len(body):
            break
        kind, pos = kind + body[pos], pos + 1
        while pos < len(body) and body[pos] == 0xFF:
            size, pos = size + 255, pos + 1
        if pos >= len(body):
            break
        size, pos = size + body[pos], pos + 1
        types.append(kind)
        pos += size
    return types


def _pps_coder(data: bytes, start: int, end: int) -> str:
    # pic_parameter_set_id, seq_parameter_set_id, then entropy_coding_mode_flag
    bits = BitReader(unescape(data[start + 1 : min(end, start + 17)]))
    bits.ue()
    bits.ue()
    return "cabac" if bits.bit() else "cavlc"


def entropy_coders(data: bytes) -> set[str]:
    """The entropy coder (``"cabac"`` or ``"cavlc"``) of every picture parameter set in Annex B ``data``
    (empty when it carries none). Raises ``ValueError`` for a parameter set cut short."""
    return {_pps_coder(data, start, end) for start, end in nal_units(data) if data[start] & 0x1F == NAL_PPS}


def avcc_entropy_coders(extradata: bytes) -> set[str]:
    """:func:`entropy_coders` of the parameter sets in an MP4 stream's ``avcC`` record (ISO/IEC 14496-15:
    a 5-byte header, the SPS count and SPSs, the PPS count and PPSs, each NAL unit after a 2-byte size).

    Raises ``ValueError`` when ``extradata`` is not an ``avcC`` record.
    """
    if len(extradata) < 7 or extradata[0] != 1:
        raise ValueError(
            f"not an avcC record ({len(extradata)} bytes, version {extradata[:1].hex() or 'none'})"
        )
    pos = 5
    units = []
    for count_mask in (0x1F, 0xFF):  # SPSs, then PPSs
        if pos >= len(extradata):
            raise ValueError(f"avcC record cut short at byte {pos} of {len(extradata)}")
        count = extradata[pos] & count_mask
        pos += 1
        for _ in range(count):
            size = int.from_bytes(extradata[pos : pos + 2], "big")
            units.append(b"\x00\x00\x01" + extradata[pos + 2 : pos + 2 + size])
            pos += 2 + size
    return entropy_coders(b"".join(units))


def coder_mismatch(found: set[str], asked: str) -> str | None:
    """Why the entropy coders ``found`` in a stream's parameter sets are not the one ``asked`` for, or None."""
    if found == {asked}:
        return None
    return f"parameter sets say {sorted(found) or 'nothing'}, the profile asks for {asked}"


#: Letters of intra random access points (IDR, and an open GOP's other I-frames).
KEY_LETTERS = frozenset("Ii")


def frame_letter(info: AccessUnitInfo) -> str:
    """One letter per frame for the frame table: ``I`` (IDR), ``i`` (another I-frame a decoder may start
    at: an open GOP's anchor), ``P`` (a P-frame, or an I-frame a decoder cannot start at), ``B`` (reference
    B) or ``b`` (non-reference B)."""
    if info.picture_type == "I":
        if info.idr:
            return "I"
        return "i" if info.random_access else "P"
    if info.picture_type == "B":
        return "B" if info.reference else "b"
    return "P"
