"""Just enough of the H.265/HEVC bitstream to audit a GOP: NAL unit headers and the first slice's type.

The same :class:`~pipeline.transcode.h264.AccessUnitInfo` as for H.264, so that the frame letters, the GOP
audit and the sample reader do not care which codec a stream is. HEVC says in the NAL unit type what H.264
says in ``nal_ref_idc``: the even types below 16 (``TRAIL_N``, ``RASL_N``...) are sub-layer non-reference
pictures, which no picture of the same temporal sub-layer predicts from. IDR pictures (types 19, 20) are
``I``; the other intra random access points (CRA, BLA: an open GOP's shared anchors) are ``i``, and an
I-picture that is not a random access point counts as a ``P`` (a reference nothing may start at). HEVC has
only CABAC, which is what the parameter sets are reported to carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.transcode.h264 import AccessUnitInfo, BitReader, nal_units, unescape

NAL_BLA_FIRST = 16
NAL_IDR_W_RADL = 19
NAL_IDR_N_LP = 20
NAL_CRA = 21
NAL_IRAP_LAST = 23
NAL_VCL_LAST = 31
NAL_PPS = 34
#: slice_type -> picture type letter (H.265 7.4.7.1).
_SLICE_TYPES = {0: "B", 1: "P", 2: "I"}


@dataclass(frozen=True)
class HevcUnitInfo(AccessUnitInfo):
    """:class:`AccessUnitInfo` plus the picture's temporal sub-layer (a sub-layer non-reference picture can
    still be predicted from by pictures of higher sub-layers)."""

    temporal_id: int = 0


def _header(data: bytes, start: int) -> tuple[int, int]:
    """(nal_unit_type, TemporalId) of the two-byte NAL unit header at ``start``."""
    if start + 2 > len(data):
        raise ValueError("NAL unit header cut short")
    return (data[start] >> 1) & 0x3F, (data[start + 1] & 0x07) - 1


def _extra_slice_header_bits(data: bytes, start: int, end: int) -> int:
    # pps_pic_parameter_set_id, pps_seq_parameter_set_id, dependent_slice_segments_enabled_flag,
    # output_flag_present_flag, then num_extra_slice_header_bits (3 bits)
    bits = BitReader(unescape(data[start + 2 : min(end, start + 18)]))
    bits.ue()
    bits.ue()
    bits.bit()
    bits.bit()
    return (bits.bit() << 2) | (bits.bit() << 1) | bits.bit()


def access_unit_info(data: bytes) -> HevcUnitInfo:
    """Picture type, IDR flag, reference flag and temporal id of an Annex B HEVC access unit (from its
    first slice segment), and ``{"cabac"}`` when parameter sets precede it.

    Raises ``ValueError`` when the unit holds no slice or a header it reads is cut short.
    """
    extra_bits = 0
    coders = set()
    for start, end in nal_units(data):
        nal_type, temporal_id = _header(data, start)
        if nal_type == NAL_PPS:
            extra_bits = _extra_slice_header_bits(data, start, end)
            coders.add("cabac")
        if nal_type > NAL_VCL_LAST:
            continue
        bits = BitReader(unescape(data[start + 2 : min(end, start + 18)]))
        if not bits.bit():
            raise ValueError("access unit starts with a dependent slice segment, not a picture's first")
        if NAL_BLA_FIRST <= nal_type <= NAL_IRAP_LAST:
            bits.bit()  # no_output_of_prior_pics_flag
        bits.ue()  # slice_pic_parameter_set_id
        for _ in range(extra_bits):
            bits.bit()
        slice_type = bits.ue()
        if slice_type not in _SLICE_TYPES:
            raise ValueError(f"slice_type {slice_type} is not B, P or I")
        picture = _SLICE_TYPES[slice_type]
        idr = nal_type in (NAL_IDR_W_RADL, NAL_IDR_N_LP)
        irap = NAL_BLA_FIRST <= nal_type <= NAL_IRAP_LAST
        reference = irap or nal_type > 14 or nal_type % 2 == 1
        return HevcUnitInfo(picture, idr, reference, frozenset(coders), irap, temporal_id)
    raise ValueError("access unit holds no slice NAL unit")


def hvcc_has_parameter_sets(extradata: bytes) -> bool:
    """Whether an MP4 stream's ``hvcC`` record (ISO/IEC 14496-15 8.3.3) carries a PPS array."""
    if len(extradata) < 23 or extradata[0] != 1:
        return False
    pos, arrays = 23, extradata[22]
    for _ in range(arrays):
        if pos + 3 > len(extradata):
            return False
        nal_type, count = extradata[pos] & 0x3F, int.from_bytes(extradata[pos + 1 : pos + 3], "big")
        if nal_type == NAL_PPS and count:
            return True
        pos += 3
        for _ in range(count):
            pos += 2 + int.from_bytes(extradata[pos : pos + 2], "big")
    return False
