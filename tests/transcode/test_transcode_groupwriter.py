"""The grouped writer puts a chunk's messages into the stock writer in one go: the bytes must be those that
the stock ``Writer.add_message`` writes for the same messages, one call each."""

from __future__ import annotations

import io
import random

import pytest
from mcap.reader import make_reader

from pipeline.transcode.groupwriter import GroupedWriter, GroupSpec, OutMessage


def _episode_bytes(seed: int) -> bytes:
    """Three groups of channels (one uncompressed), units of one to three messages added in time order
    with a group closed in between, some log times equal, sequences set, schemas and channels registered
    between chunks (their records go into the open chunk)."""
    rng = random.Random(seed)
    out = io.BytesIO()
    writer = GroupedWriter(
        out,
        {"video": GroupSpec(3000, "none"), "state": GroupSpec(800, "zstd"), "raw": GroupSpec(500, "lz4")},
        library="test",
    )
    writer.start()
    writer.add_metadata("episode", {"k": "v"})
    schema = writer.register_schema("s", "jsonschema", b"{}")
    channels = {
        g: [writer.register_channel(f"/{g}/{k}", "json", schema) for k in range(2)] for g in ("video",)
    }
    for group in ("video", "state", "raw"):
        if group != "video":
            # registered now: the records land in the chunk that the previous group left open, or the next
            channels[group] = [writer.register_channel(f"/{group}/{k}", "json", schema) for k in range(2)]
        time_ns = 1_700_000_000_000_000_000
        for _ in range(rng.randrange(20, 60)):
            time_ns += rng.choice([0, 1, 1000, 33_000_000])
            unit = [
                OutMessage(
                    rng.choice(channels[group]),
                    log_time=time_ns + rng.choice([0, 0, 5]),
                    publish_time=time_ns - rng.randrange(1000),
                    data=rng.randbytes(rng.randrange(0, 400)),
                    sequence=rng.randrange(2**32),
                )
                for _ in range(rng.randrange(1, 4))
            ]
            writer.add(group, unit)
        writer.close_group(group)
    writer.finish()
    return out.getvalue()


def _put_one_by_one(self: GroupedWriter, messages: list[OutMessage]) -> None:
    for m in messages:
        self.writer.add_message(
            m.channel_id, log_time=m.log_time, data=m.data, publish_time=m.publish_time, sequence=m.sequence
        )


@pytest.mark.parametrize("seed", range(5))
def test_chunks_put_in_one_go_are_the_stock_writers_bytes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _episode_bytes(seed)
    monkeypatch.setattr(GroupedWriter, "_put", _put_one_by_one)
    stock = _episode_bytes(seed)
    assert ours == stock
    reader = make_reader(io.BytesIO(ours), validate_crcs=True)
    summary = reader.get_summary()
    assert summary is not None and summary.statistics is not None
    assert summary.statistics.message_count == sum(1 for _ in reader.iter_messages(log_time_order=False))
    assert len(summary.chunk_indexes) > 3
