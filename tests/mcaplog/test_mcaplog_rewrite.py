"""Rewriting with the stock writer keeps every message, schema, channel and metadata record; edits apply."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from mcap.reader import make_reader

from pipeline.mcaplog import read_log
from pipeline.mcaplog.rewrite import rewrite_with_stock_writer


def _contents(path: Path) -> tuple[Counter[str], dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        counts = Counter(channel.topic for _, channel, _ in reader.iter_messages())
        summary = reader.get_summary()
        assert summary is not None
        channels = {c.topic: dict(c.metadata) for c in summary.channels.values()}
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return counts, channels, metadata


def test_a_rewrite_keeps_everything_and_reads_cleanly(robot_log, tmp_path: Path) -> None:
    src, counts = robot_log()
    dst = rewrite_with_stock_writer(src, tmp_path / "stock.mcap")
    assert _contents(dst) == _contents(src)
    assert dict(_contents(dst)[0]) == counts
    assert read_log(dst).ok


def test_an_edit_drops_and_repeats_messages(robot_log, tmp_path: Path) -> None:
    src, counts = robot_log()
    dropped, doubled = sorted(counts)[:2]

    def edit(channel, message):
        if channel.topic == dropped:
            return []
        return [message, message] if channel.topic == doubled else [message]

    counted = _contents(rewrite_with_stock_writer(src, tmp_path / "edited.mcap", edit=edit))[0]
    assert dropped not in counted and counted[doubled] == 2 * counts[doubled]
