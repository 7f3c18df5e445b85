"""Readers the synth tests share: the stock ``mcap`` readers with CRC validation, and PyAV decoding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import zstandard
from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import CRCValidationError, StreamReader

from pipeline.synth import DropFile, DropManifest

# What a read of a damaged MCAP may raise: the library's own errors, a short read deep in its parser, or
# the decompressor's error on a damaged chunk (zstandard's is not an McapError: ingest must catch it too).
READ_ERRORS = (McapError, CRCValidationError, EOFError, OSError, ValueError, zstandard.ZstdError)


@dataclass
class LinearRead:
    """Everything a CRC-validated linear pass saw, messages in file order."""

    schemas: dict[int, Schema]
    channels: dict[int, Channel]
    messages: list[Message]

    def topic(self, topic: str) -> list[Message]:
        ids = {cid for cid, ch in self.channels.items() if ch.topic == topic}
        return [m for m in self.messages if m.channel_id in ids]

    @property
    def topics(self) -> set[str]:
        return {ch.topic for ch in self.channels.values()}


def read_linear(path: Path) -> LinearRead:
    """One pass of ``StreamReader`` with chunk and data-section CRCs validated."""
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    messages: list[Message] = []
    with open(path, "rb") as fh:
        for record in StreamReader(fh, validate_crcs=True).records:
            if isinstance(record, Schema):
                schemas[record.id] = record
            elif isinstance(record, Channel):
                channels[record.id] = record
            elif isinstance(record, Message):
                messages.append(record)
    return LinearRead(schemas, channels, messages)


def read_indexed(path: Path) -> int:
    """A full read through the seeking reader with CRCs validated; returns the message count."""
    with open(path, "rb") as fh:
        reader = make_reader(fh, validate_crcs=True)
        return sum(1 for _ in reader.iter_messages())


def decode_annexb(units: list[bytes]) -> list[np.ndarray]:
    """Decode raw H.264 access units (one per message) to RGB frames."""
    codec = av.CodecContext.create("h264", "r")
    decoded = []
    for data in units:
        decoded += codec.decode(av.Packet(data))
    decoded += codec.decode(None)
    return [f.to_ndarray(format="rgb24") for f in decoded]


def decode_clip(path: Path) -> tuple[list[av.VideoFrame], int]:
    """Every frame of an MP4 in presentation order, and how many packets the decoder refused."""
    frames, errors = [], 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for packet in container.demux(stream):
            try:
                frames += packet.decode()
            except av.error.InvalidDataError:
                errors += 1
    return frames, errors


def only(manifest: DropManifest, defect: str | None) -> DropFile:
    """The one file of the drop carrying ``defect`` (None: the first clean file)."""
    found = manifest.by_defect(defect)
    assert found, f"no file with defect {defect!r} in the drop"
    return found[0]
