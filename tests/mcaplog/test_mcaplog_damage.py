"""Damaged files made from valid ones: each gets the right reason, nothing crashes, no partial rows."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from mcaplog_helpers import (
    MAGIC,
    OP_CHUNK,
    OP_DATA_END,
    OP_FOOTER,
    OP_MESSAGE,
    OP_STATISTICS,
    first,
    flip,
    walk_records,
)

from pipeline.enums import ReasonCode
from pipeline.errors import StoreError
from pipeline.mcaplog import LogReport, McapInputError, ReadLimits, iter_messages, probe_structure, read_log

VARIANTS = {
    "chunked-indexed": {"chunked": True, "index": True},
    "chunked-no-index": {"chunked": True, "index": False},
    "chunked-plain-indexed": {"chunked": True, "index": True, "compression": ""},
    "unchunked-indexed": {"chunked": False, "index": True},
    "unchunked-no-index": {"chunked": False, "index": False},
}


def _damaged(tmp_path: Path, data: bytes, name: str = "damaged.mcap") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _assert_failed(report: LogReport, code: ReasonCode) -> None:
    """The read failed for ``code`` and returned no rows at all."""
    assert not report.ok
    assert report.fatal is not None and report.fatal.code == code, report.findings
    assert (report.topics, report.channels, report.schemas, report.attachments, report.metadata) == ((),) * 5
    assert report.message_count == 0 and report.crc is None


def test_zero_byte_file(tmp_path: Path) -> None:
    _assert_failed(read_log(_damaged(tmp_path, b"")), ReasonCode.ZERO_BYTES)
    assert [f.code for f in probe_structure(tmp_path / "damaged.mcap").findings] == [ReasonCode.ZERO_BYTES]


def test_wrong_magic_under_the_right_extension(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(200)
    _assert_failed(read_log(_damaged(tmp_path, png)), ReasonCode.BAD_MAGIC)
    valid = small_mcap().read_bytes()
    _assert_failed(read_log(_damaged(tmp_path, flip(valid, 3))), ReasonCode.BAD_MAGIC)
    # the closing magic is checked too
    report = read_log(_damaged(tmp_path, flip(valid, len(valid) - 2)))
    assert not report.ok and report.topics == ()


@pytest.mark.parametrize("variant", VARIANTS)
def test_truncated_after_the_magic(tmp_path: Path, small_mcap: Callable[..., Path], variant: str) -> None:
    valid = small_mcap(**VARIANTS[variant]).read_bytes()
    for cut in (len(MAGIC), len(MAGIC) + 5, len(MAGIC) + 30):
        _assert_failed(read_log(_damaged(tmp_path, valid[:cut])), ReasonCode.TRUNCATED)
    _assert_failed(read_log(_damaged(tmp_path, valid[:5])), ReasonCode.TRUNCATED)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if VARIANTS[v]["chunked"]])
def test_truncated_mid_chunk(tmp_path: Path, small_mcap: Callable[..., Path], variant: str) -> None:
    valid = small_mcap(**VARIANTS[variant]).read_bytes()
    offset, _, length = first(walk_records(valid), OP_CHUNK)
    report = read_log(_damaged(tmp_path, valid[: offset + 9 + length // 2]))
    _assert_failed(report, ReasonCode.TRUNCATED)
    assert report.fatal is not None and report.fatal.offset == offset


@pytest.mark.parametrize("variant", VARIANTS)
def test_truncated_at_a_record_boundary(
    tmp_path: Path, small_mcap: Callable[..., Path], variant: str
) -> None:
    valid = small_mcap(**VARIANTS[variant]).read_bytes()
    records = walk_records(valid)
    data_end = first(records, OP_DATA_END)[0]
    # after a whole message or chunk, and right before the DataEnd record: every message is in the file
    offset, _, length = [r for r in records if r[1] in (OP_CHUNK, OP_MESSAGE)][-1]
    for cut in (offset + 9 + length, data_end):
        report = read_log(_damaged(tmp_path, valid[:cut]))
        _assert_failed(report, ReasonCode.TRUNCATED)
    assert report.messages_seen == 40  # it read them all, and still returns none of them


@pytest.mark.parametrize("variant", [v for v in VARIANTS if VARIANTS[v]["chunked"]])
def test_chunk_crc_flipped(tmp_path: Path, small_mcap: Callable[..., Path], variant: str) -> None:
    valid = small_mcap(**VARIANTS[variant]).read_bytes()
    offset, _, _ = first(walk_records(valid), OP_CHUNK)
    crc_field = offset + 9 + 8 + 8 + 8
    _assert_failed(read_log(_damaged(tmp_path, flip(valid, crc_field))), ReasonCode.CRC_MISMATCH)


def test_chunk_payload_byte_flipped(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    """In an uncompressed chunk a flipped payload byte still parses: only the chunk CRC can tell."""
    for index in (True, False):
        valid = small_mcap(compression="", index=index).read_bytes()
        offset, _, length = first(walk_records(valid), OP_CHUNK)
        report = read_log(_damaged(tmp_path, flip(valid, offset + 9 + length - 3)))
        _assert_failed(report, ReasonCode.CRC_MISMATCH)
        with pytest.raises(McapInputError) as caught:
            list(iter_messages(tmp_path / "damaged.mcap"))
        assert caught.value.code == ReasonCode.CRC_MISMATCH


@pytest.mark.parametrize("index", [True, False])
def test_data_section_crc_mismatch_in_an_unchunked_file(
    tmp_path: Path, small_mcap: Callable[..., Path], index: bool
) -> None:
    valid = small_mcap(chunked=False, index=index, data_crcs=True).read_bytes()
    messages = [r for r in walk_records(valid) if r[1] == OP_MESSAGE]
    offset, _, length = messages[-1]
    damaged = flip(valid, offset + 9 + length - 2)  # inside the last message's JSON payload
    report = read_log(_damaged(tmp_path, damaged))
    _assert_failed(report, ReasonCode.CRC_MISMATCH)
    assert report.fatal is not None and report.fatal.offset == first(walk_records(valid), OP_DATA_END)[0]


def test_crc_error_after_the_last_message_fails_the_whole_read(
    tmp_path: Path, small_mcap: Callable[..., Path]
) -> None:
    """Every message was already read and counted when the DataEnd CRC comes: still no result."""
    valid = small_mcap(chunked=False, data_crcs=True).read_bytes()
    data_end = first(walk_records(valid), OP_DATA_END)[0]
    report = read_log(_damaged(tmp_path, flip(valid, data_end + 9)))  # the stored CRC itself
    _assert_failed(report, ReasonCode.CRC_MISMATCH)
    assert report.messages_seen == 40
    # the streaming API has yielded the messages by then, and raises at the end
    seen = []
    with pytest.raises(McapInputError) as caught:
        for item in iter_messages(tmp_path / "damaged.mcap", log_time_order=False):
            seen.append(item)
    assert caught.value.code == ReasonCode.CRC_MISMATCH and len(seen) == 40


def test_summary_crc_mismatch(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    valid = small_mcap().read_bytes()
    stats_offset = first(walk_records(valid), OP_STATISTICS)[0]
    damaged = _damaged(tmp_path, flip(valid, stats_offset + 9))  # the message count
    _assert_failed(read_log(damaged), ReasonCode.CRC_MISMATCH)
    assert probe_structure(damaged).findings[0].code == ReasonCode.CRC_MISMATCH


def test_summary_lie_without_crcs_is_caught_by_cross_checks(
    tmp_path: Path, small_mcap: Callable[..., Path]
) -> None:
    valid = small_mcap(crcs=False).read_bytes()
    stats_offset = first(walk_records(valid), OP_STATISTICS)[0]
    _assert_failed(read_log(_damaged(tmp_path, flip(valid, stats_offset + 9))), ReasonCode.CONTAINER_ERROR)


OP_MESSAGE_INDEX = 0x07
ENTRY_BYTES = 16  # log time, position in the chunk


def test_a_message_index_must_list_exactly_the_messages_of_its_chunk(
    tmp_path: Path, small_mcap: Callable[..., Path]
) -> None:
    valid = small_mcap().read_bytes()  # chunk CRCs on: they do not cover the indexes after a chunk
    pos, _, length = first(walk_records(valid), OP_MESSAGE_INDEX)
    entries = pos + 9 + 2 + 4  # past the record header, the channel id and the entries' byte length
    assert length >= 2 + 4 + 2 * ENTRY_BYTES
    first_entry, second_entry = (
        valid[entries : entries + ENTRY_BYTES],
        valid[entries + ENTRY_BYTES : entries + 2 * ENTRY_BYTES],
    )
    for where in (entries, entries + 8, entries + ENTRY_BYTES + 8):  # a log time, a position, another
        _assert_failed(read_log(_damaged(tmp_path, flip(valid, where))), ReasonCode.CONTAINER_ERROR)
    twice = valid[:entries] + first_entry + first_entry + valid[entries + 2 * ENTRY_BYTES :]
    _assert_failed(read_log(_damaged(tmp_path, twice)), ReasonCode.CONTAINER_ERROR)
    # the same entries in another order list the same messages
    swapped = valid[:entries] + second_entry + first_entry + valid[entries + 2 * ENTRY_BYTES :]
    assert read_log(_damaged(tmp_path, swapped)).ok


@pytest.mark.parametrize(
    ("options", "absent"),
    [
        ({"chunked": True, "crcs": False}, True),
        ({"chunked": True, "index": False, "crcs": False}, True),
        ({"chunked": False, "crcs": False}, True),
        ({"chunked": False, "crcs": True}, True),  # the stock writer's default: no data-section CRC
        ({"chunked": True, "crcs": True}, False),  # chunk CRCs cover every message
        ({"chunked": False, "data_crcs": True}, False),
    ],
)
def test_crcs_absent_is_a_flag(small_mcap: Callable[..., Path], options: dict, absent: bool) -> None:
    report = read_log(small_mcap(**options))
    assert report.ok and report.message_count == 40
    assert (ReasonCode.CRC_ABSENT in report.reason_codes) is absent
    crc_flags = [f for f in report.findings if f.code == ReasonCode.CRC_ABSENT]
    assert all(not f.fatal for f in crc_flags)


def test_unknown_chunk_compression(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    valid = small_mcap(compression="zstd").read_bytes()
    offset, _, _ = first(walk_records(valid), OP_CHUNK)
    name_at = offset + 9 + 8 + 8 + 8 + 4 + 4
    assert valid[name_at : name_at + 4] == b"zstd"
    damaged = valid[:name_at] + b"brot" + valid[name_at + 4 :]
    report = read_log(_damaged(tmp_path, damaged))
    _assert_failed(report, ReasonCode.UNKNOWN_COMPRESSION)
    assert "brot" in report.fatal.detail  # type: ignore[union-attr]


def test_readable_but_disallowed_compression_is_a_finding(small_mcap: Callable[..., Path]) -> None:
    report = read_log(small_mcap(compression="lz4"), allowed_compressions={"", "zstd"})
    assert report.ok and report.message_count == 40
    assert [f.code for f in report.findings] == [ReasonCode.UNKNOWN_COMPRESSION]
    assert report.compressions == ("lz4",)


@pytest.mark.parametrize("variant", VARIANTS)
def test_absurd_record_length(tmp_path: Path, small_mcap: Callable[..., Path], variant: str) -> None:
    valid = small_mcap(**VARIANTS[variant]).read_bytes()
    offset, _, _ = [r for r in walk_records(valid) if r[1] in (OP_CHUNK, OP_MESSAGE)][1]
    damaged = valid[: offset + 1] + struct.pack("<Q", 2**62) + valid[offset + 9 :]
    report = read_log(_damaged(tmp_path, damaged))
    _assert_failed(report, ReasonCode.RECORD_TOO_LARGE)
    assert report.fatal is not None and report.fatal.offset == offset


def test_record_limit_is_configurable(small_mcap: Callable[..., Path]) -> None:
    path = small_mcap(chunk_size=4096)
    assert read_log(path).ok
    _assert_failed(read_log(path, limits=ReadLimits(max_record_bytes=300)), ReasonCode.RECORD_TOO_LARGE)
    tight = ReadLimits(max_chunk_uncompressed_bytes=1000)
    _assert_failed(read_log(path, limits=tight), ReasonCode.RECORD_TOO_LARGE)


def test_corrupt_length_inside_a_complete_file_is_not_called_truncation(
    tmp_path: Path, small_mcap: Callable[..., Path]
) -> None:
    valid = small_mcap(chunked=False, index=False).read_bytes()
    offset, _, _ = first(walk_records(valid), OP_MESSAGE)
    damaged = valid[: offset + 1] + struct.pack("<Q", len(valid)) + valid[offset + 9 :]
    _assert_failed(read_log(_damaged(tmp_path, damaged)), ReasonCode.CONTAINER_ERROR)


# Exhaustive over one small file per layout where it matters most, strided elsewhere (each read ~4 ms).
SWEEPS = [
    pytest.param("chunked-plain-indexed", 1, marks=pytest.mark.slow),
    pytest.param("unchunked-indexed", 1, marks=pytest.mark.slow),
    pytest.param("chunked-indexed", 7),
    pytest.param("unchunked-no-index", 7),
]


@pytest.mark.parametrize(("variant", "stride"), SWEEPS)
def test_every_truncation_fails_and_nothing_raises(
    tmp_path: Path, small_mcap: Callable[..., Path], variant: str, stride: int
) -> None:
    valid = small_mcap(messages=6, attachment=True, data_crcs=True, **VARIANTS[variant]).read_bytes()
    path = tmp_path / "cut.mcap"
    codes = set()
    for cut in [*range(0, len(valid), stride), len(valid) - 1]:
        path.write_bytes(valid[:cut])
        report = read_log(path)
        assert not report.ok and report.topics == (), cut
        codes.add(report.fatal.code)  # type: ignore[union-attr]
    assert codes == {ReasonCode.ZERO_BYTES, ReasonCode.TRUNCATED}


@pytest.mark.parametrize(("variant", "stride"), SWEEPS)
def test_every_single_byte_flip_is_caught_when_all_crcs_are_on(
    tmp_path: Path, small_mcap: Callable[..., Path], variant: str, stride: int
) -> None:
    """With chunk, data-section and summary CRCs written, no byte of the file can change unnoticed."""
    valid = small_mcap(messages=6, attachment=True, data_crcs=True, **VARIANTS[variant]).read_bytes()
    path = tmp_path / "flipped.mcap"
    missed = []
    for offset in range(0, len(valid), stride):
        path.write_bytes(flip(valid, offset, 0x10))
        report = read_log(path)
        if report.ok:
            missed.append(offset)
        else:
            assert report.topics == () and report.fatal is not None
    assert missed == []


def test_iter_messages_refuses_a_broken_file(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    valid = small_mcap().read_bytes()
    path = _damaged(tmp_path, valid[: len(valid) // 2])
    with pytest.raises(McapInputError) as caught:
        next(iter_messages(path))
    assert caught.value.code == ReasonCode.TRUNCATED


def test_footer_must_be_the_last_record(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    valid = small_mcap(index=False).read_bytes()
    footer = first(walk_records(valid), OP_FOOTER)[0]
    damaged = valid[:footer] + valid[footer : footer + 9 + 20] + valid[footer:]  # a second footer
    report = read_log(_damaged(tmp_path, damaged))
    assert not report.ok and report.topics == ()


def test_appended_bytes_are_a_container_error(tmp_path: Path, small_mcap: Callable[..., Path]) -> None:
    valid = small_mcap().read_bytes()
    report = read_log(_damaged(tmp_path, valid + b"\x00" * 16))
    assert report.fatal is not None and report.fatal.code == ReasonCode.CONTAINER_ERROR
    assert "follow the closing magic" in report.fatal.detail


def test_an_unreadable_path_is_a_platform_fault_not_bad_input(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        read_log(tmp_path / "missing.mcap")


def test_open_file_objects_are_read_too(small_mcap: Callable[..., Path]) -> None:
    path = small_mcap()
    with path.open("rb") as handle:
        handle.seek(5)
        report = read_log(handle)
        assert handle.tell() == 5  # the caller's position is left alone
    assert report.ok and report.message_count == 40 and report.source == str(path)
