"""Decode message payloads by their channel's encoding, and find hardware stamps in them.

JSON goes through the standard library; protobuf through the schema's FileDescriptorSet with
``mcap-protobuf-support``; ROS 2 CDR with ``mcap-ros2-support``. Decoders are cached by schema *content*
(name + bytes), so one cache serves every file without schema-id collisions between files.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message as ProtobufMessage
from mcap.exceptions import McapError
from mcap.records import Channel, Schema

from pipeline.mcaplog.exceptions import DecodeError, UnsupportedEncodingError

logger = logging.getLogger(__name__)

DECODABLE_MESSAGE_ENCODINGS: tuple[str, ...] = ("json", "protobuf", "cdr")
# Tried in order on the first decodable message of a channel; the first that yields a time is kept.
DEFAULT_STAMP_FIELDS: tuple[str, ...] = ("stamp_ns", "timestamp", "header.stamp", "stamp")
# Schema caches: a worker sees few distinct schemas; 256 bounds memory if a vendor mints many.
_SCHEMA_CACHE_SIZE = 256

_MISSING = object()


def decode_json(data: bytes) -> Any:
    """A JSON message payload (UTF-8) as Python objects."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DecodeError("json message", f"{type(exc).__name__}: {exc}") from None


def decode_protobuf(schema: Schema, data: bytes) -> Any:
    """A protobuf message payload, using the schema's serialized FileDescriptorSet."""
    decoder = _protobuf_decoder(schema.name, schema.data)
    try:
        return decoder(data)
    except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
        raise DecodeError(f"protobuf message {schema.name}", str(exc)) from None


def decode_ros2(schema: Schema, data: bytes) -> Any:
    """A ROS 2 CDR message payload, using the schema's ``ros2msg`` definition."""
    decoder = _ros2_decoder(schema.name, schema.data)
    try:
        return decoder(data)
    except Exception as exc:  # the CDR reader raises bare struct/index errors on bad bytes
        raise DecodeError(f"ros2 message {schema.name}", f"{type(exc).__name__}: {exc}") from None


def decoder_for(schema: Schema | None, message_encoding: str) -> Callable[[bytes], Any] | None:
    """A payload decoder for this channel, or ``None`` if we have none for its encodings."""
    schema_encoding = schema.encoding if schema is not None else None
    if message_encoding == "json" and schema_encoding in (None, "", "jsonschema"):
        return decode_json
    if message_encoding == "protobuf" and schema is not None and schema_encoding == "protobuf":
        _protobuf_decoder(schema.name, schema.data)  # fail early on a bad descriptor set
        return functools.partial(decode_protobuf, schema)
    if message_encoding == "cdr" and schema is not None and schema_encoding == "ros2msg":
        _ros2_decoder(schema.name, schema.data)
        return functools.partial(decode_ros2, schema)
    return None


def decode_message(schema: Schema | None, channel: Channel, data: bytes) -> Any:
    """Decode one payload by its channel's message encoding (json, protobuf or cdr)."""
    decoder = decoder_for(schema, channel.message_encoding)
    if decoder is None:
        raise UnsupportedEncodingError(
            channel.message_encoding, schema.encoding if schema else None, DECODABLE_MESSAGE_ENCODINGS
        )
    return decoder(data)


def stamp_ns(decoded: Any, path: str) -> int | None:
    """The time at a dotted ``path`` in a decoded message as integer ns, or ``None``.

    Accepts an integer (taken as ns), a protobuf ``Timestamp`` or any object/dict with ``seconds``/``nanos``
    or ``sec``/``nanosec`` (ROS ``builtin_interfaces/Time``). Floats are refused: their unit is a guess.
    """
    value = decoded
    for part in path.split("."):
        value = _field(value, part)
        if value is _MISSING:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, ProtobufMessage) and value.DESCRIPTOR.full_name == "google.protobuf.Timestamp":
        # by name: schema-built classes live in their own descriptor pool, not the default one
        return int(value.seconds) * 1_000_000_000 + int(value.nanos)
    for sec_name, nsec_name in (("seconds", "nanos"), ("sec", "nanosec")):
        sec, nsec = _field(value, sec_name), _field(value, nsec_name)
        if isinstance(sec, int) and isinstance(nsec, int) and not isinstance(sec, bool):
            return sec * 1_000_000_000 + nsec
    return None


def value_at(decoded: Any, path: str, default: Any = None) -> Any:
    """The value at a dotted ``path`` of a decoded message (CDR object, protobuf message or JSON mapping),
    or ``default`` when a part of the path is not there (an unset protobuf sub-message counts as not
    there)."""
    value = decoded
    for part in path.split("."):
        value = _field(value, part)
        if value is _MISSING:
            return default
    return value


def ros2_has_top_level_field(schema: Schema, name: str) -> bool:
    """Whether a ``ros2msg`` definition declares ``name`` at its top level (before any nested definition).

    Used to decode CDR only for channels that can carry a stamp: the CDR decoder is pure Python.
    """
    text = schema.data.decode("utf-8", errors="replace").split("\n=====", 1)[0]
    return re.search(rf"^\s*[\w/]+\s+{re.escape(name)}\s*(?:#.*)?$", text, flags=re.MULTILINE) is not None


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, _MISSING)
    if isinstance(obj, ProtobufMessage):
        if name not in obj.DESCRIPTOR.fields_by_name:
            return _MISSING
        with contextlib.suppress(ValueError):  # HasField refuses repeated and plain scalar fields
            if not obj.HasField(name):
                return _MISSING
        return getattr(obj, name)
    return getattr(obj, name, _MISSING)


@functools.lru_cache(maxsize=_SCHEMA_CACHE_SIZE)
def _protobuf_decoder(name: str, data: bytes) -> Callable[[bytes], Any]:
    from mcap_protobuf.decoder import DecoderFactory

    try:
        decoder = DecoderFactory().decoder_for(
            "protobuf", Schema(id=1, name=name, encoding="protobuf", data=data)
        )
    except (McapError, ProtobufDecodeError, TypeError, KeyError, ValueError) as exc:
        raise DecodeError(f"protobuf schema {name}", str(exc)) from None
    assert decoder is not None
    return decoder


@functools.lru_cache(maxsize=_SCHEMA_CACHE_SIZE)
def _ros2_decoder(name: str, data: bytes) -> Callable[[bytes], Any]:
    from mcap_ros2.decoder import DecoderFactory

    chatter = io.StringIO()
    try:
        # The ROS 2 schema parser prints on definitions it cannot parse (the field line, to stderr: a
        # service's '---', say); keep that in the log, off the user's terminal.
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            decoder = DecoderFactory().decoder_for(
                "cdr", Schema(id=1, name=name, encoding="ros2msg", data=data)
            )
    except Exception as exc:  # the vendored rosidl parser raises its own exception types
        raise DecodeError(f"ros2 schema {name}", f"{type(exc).__name__}: {exc}") from None
    finally:
        if chatter.getvalue():
            logger.debug("ros2 schema parser on %s: %s", name, chatter.getvalue().strip())
    assert decoder is not None
    return decoder
