"""Rewriting an MCAP with the stock ``mcap`` writer: the reference layout, and edited copies for tests.

The stock writer's defaults (1 MiB chunks, zstd, every index, all topics interleaved in log-time order) are
the layout ``sluice bench read`` measures ours against; tests use ``edit`` to make a defect the synthesiser
does not (drop, repeat or retime messages) in an otherwise well-formed file. Its input is trusted (one of
ours): untrusted files go through :func:`pipeline.mcaplog.read_log`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from mcap.reader import make_reader
from mcap.records import Channel, Message
from mcap.writer import Writer

from pipeline.enums import ReasonCode
from pipeline.mcaplog.exceptions import McapInputError

#: (channel, message) → the messages to write instead (none drops it; the message itself keeps it).
Edit = Callable[[Channel, Message], Iterable[Message]]


def rewrite_with_stock_writer(
    src: Path | str,
    dst: Path | str,
    *,
    edit: Edit | None = None,
    log_time_order: bool = True,
    library: str = "sluice rewrite",
) -> Path:
    """Copy ``src`` to ``dst`` with the stock writer's defaults: schemas, channels (with their metadata) and
    metadata records kept, messages passed through ``edit`` in log-time order (or file order)."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        reader = make_reader(fin)
        summary = reader.get_summary()
        if summary is None:
            raise McapInputError(
                ReasonCode.TRUNCATED, f"{src} has no summary section: its schemas and channels are unknown"
            )
        writer = Writer(fout)
        writer.start(profile="", library=library)
        schema_ids = {
            sid: writer.register_schema(s.name, s.encoding, s.data)
            for sid, s in sorted(summary.schemas.items())
        }
        channel_ids = {
            cid: writer.register_channel(
                c.topic, c.message_encoding, schema_ids.get(c.schema_id, 0), dict(c.metadata)
            )
            for cid, c in sorted(summary.channels.items())
        }
        for record in reader.iter_metadata():
            writer.add_metadata(record.name, dict(record.metadata))
        for _, channel, message in reader.iter_messages(log_time_order=log_time_order):
            for m in edit(channel, message) if edit is not None else (message,):
                writer.add_message(channel_ids[channel.id], m.log_time, m.data, m.publish_time, m.sequence)
        writer.finish()
    return Path(dst)
