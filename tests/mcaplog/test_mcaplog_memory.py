"""The full read keeps a few bytes per message, not a record of every message of every chunk."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from mcap.writer import CompressionType, Writer

from pipeline.mcaplog import read_log

MESSAGES = 200_000
#: Allocations the read may hold at its peak per message: its log-time arrays (8 bytes per message) and
#: their growth slack. The chunk records kept for the summary's cross-check once took ~170.
MAX_BYTES_PER_MESSAGE = 40


def _tiny_messages(path: Path, n: int) -> Path:
    with open(path, "wb") as fh:
        writer = Writer(fh, chunk_size=1 << 20, compression=CompressionType.ZSTD)
        writer.start(profile="", library="test")
        schema = writer.register_schema("t", "jsonschema", b"{}")
        channels = [writer.register_channel(f"/t{i}", "json", schema) for i in range(4)]
        for i in range(n):
            writer.add_message(
                channels[i % 4], log_time=i * 1_000_000, publish_time=i * 1_000_000, data=b"{}"
            )
        writer.finish()
    return path


def test_a_log_of_tiny_messages_is_read_in_a_few_bytes_per_message(tmp_path: Path) -> None:
    path = _tiny_messages(tmp_path / "tiny.mcap", MESSAGES)
    read_log(path)  # warm-up: imports and caches are not the read's own
    tracemalloc.start()
    try:
        report = read_log(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.message_count == MESSAGES
    assert peak / MESSAGES < MAX_BYTES_PER_MESSAGE, f"{peak / MESSAGES:.0f} bytes per message at the peak"
