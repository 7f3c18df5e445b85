"""State and action messages to resampling records: one flat mapping of numeric fields per message.

What a record holds comes from, in order: the contract's ``fields`` (dotted paths, any message type), the
type's row in :data:`~pipeline.families.table.SERIES_FAMILIES` (``JointState``: ``position``,
``velocity``, ``effort``; ``Float64MultiArray``: ``data``; poses and twists as vectors), or, for a JSON
message, the whole object as it is (today's shape), and for any other type every numeric field it has.

Vectors of a type with a names field (``JointState.name``) are keyed by name, its own fields and the ones a
contract picks alike: every message's values are put in the first message's name order, and a name set
that changes mid-episode raises ``schema_drift`` (a position vector would otherwise silently change
meaning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import Message as ProtobufMessage

from pipeline.enums import ReasonCode
from pipeline.families.errors import MessageFamilyError
from pipeline.families.table import FieldPick, SeriesFamily, series_family
from pipeline.mcaplog.decode import value_at

_MISSING = object()
#: Nesting depth explored when a type's numeric fields are gathered by walking it (a JointState is 2).
MAX_FIELD_DEPTH = 4


def is_number(value: Any) -> bool:
    """A JSON or decoded number: int or float, never a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    """A decoded value as JSON-ready Python: repeated protobuf fields and CDR arrays become lists."""
    if isinstance(value, list | tuple):
        return list(value)
    if hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, str | bytes):
        try:
            return list(value)
        except TypeError:
            return value
    return value


def _numeric(value: Any) -> bool:
    value = _plain(value)
    return is_number(value) or (isinstance(value, list) and all(is_number(v) for v in value))


def _children(obj: Any) -> list[tuple[str, Any]]:
    """The named fields of a decoded message: CDR objects (``__slots__``), protobuf messages, mappings."""
    if isinstance(obj, Mapping):
        return list(obj.items())
    if isinstance(obj, ProtobufMessage):
        return [(f.name, getattr(obj, f.name)) for f in obj.DESCRIPTOR.fields]
    slots = getattr(type(obj), "__slots__", None)
    if isinstance(slots, list | tuple):
        return [(name, getattr(obj, name)) for name in slots]
    return []


def numeric_fields(decoded: Any, *, skip: Sequence[str] = ()) -> dict[str, Any]:
    """Every numeric field (a number or a list of numbers) of a decoded message by dotted path, walking
    nested messages; paths under ``skip`` (a stamp, a header) are left out."""
    out: dict[str, Any] = {}

    def walk(obj: Any, prefix: str, depth: int) -> None:
        for name, value in _children(obj):
            path = f"{prefix}{name}"
            if any(path == s or path.startswith(s + ".") for s in skip):
                continue
            if _numeric(value):
                out[path] = _plain(value)
            elif depth < MAX_FIELD_DEPTH and _children(value):
                walk(value, path + ".", depth + 1)

    walk(decoded, "", 0)
    return out


class SeriesReader:
    """Reads one topic's decoded messages into records (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        schema_name: str | None,
        message_encoding: str,
        *,
        fields: Sequence[str] = (),
        stamp_field: str | None = None,
    ) -> None:
        self.topic = topic
        self.family: SeriesFamily | None = series_family(schema_name)
        self.stamp_field = stamp_field
        self._picks: tuple[FieldPick, ...] | None = None
        #: fields the contract names must be in every message; a type's own fields may be left empty
        self._strict = bool(fields)
        self.names_field: str | None = None
        if fields:
            self._picks = tuple(FieldPick(path, (path,)) for path in fields)
        elif self.family is not None:
            self._picks = self.family.fields
        if self.family is not None:  # the fields a contract picks of a JointState are keyed by name too
            self.names_field = self.family.names_field
        self._whole_json = self._picks is None and message_encoding == "json"
        self.names: list[str] | None = None  # the first message's names, when the type names its entries
        self._order: dict[tuple[str, ...], list[int]] = {}

    def record(self, decoded: Any, index: int) -> dict[str, Any]:
        """The record of the ``index``-th message of the topic."""
        if self._whole_json:
            if not isinstance(decoded, dict):
                raise MessageFamilyError(
                    ReasonCode.DECODE_ERROR,
                    f"{self.topic}: message {index} is a JSON {type(decoded).__name__}, not an object of fields",
                    frame=index,
                )
            return decoded
        if self._picks is None:
            skip = [self.stamp_field.split(".")[0]] if self.stamp_field else []
            return numeric_fields(decoded, skip=skip)
        record: dict[str, Any] = {}
        for pick in self._picks:
            value = self._pick(decoded, pick, index)
            if value is not _MISSING:
                record[pick.name] = value
        if self.names_field is not None:
            self._key_by_name(decoded, record, index)
        return record

    def _pick(self, decoded: Any, pick: FieldPick, index: int) -> Any:
        values = [_plain(value_at(decoded, path, _MISSING)) for path in pick.paths]
        if len(values) == 1:
            value = values[0]
            if value is _MISSING:
                if self._strict:
                    raise MessageFamilyError(
                        ReasonCode.SCHEMA_DRIFT,
                        f"{self.topic}: message {index} has no field {pick.paths[0]!r}",
                        frame=index,
                    )
                return _MISSING
            if isinstance(value, list) and not value:
                return _MISSING  # ROS leaves a vector empty when it is not measured
            return value
        if any(v is _MISSING or not is_number(v) for v in values):
            raise MessageFamilyError(
                ReasonCode.SCHEMA_DRIFT,
                f"{self.topic}: message {index} lacks a number at one of {', '.join(pick.paths)}",
                frame=index,
            )
        return values

    def _key_by_name(self, decoded: Any, record: dict[str, Any], index: int) -> None:
        assert self.names_field is not None
        names = [str(n) for n in _plain(value_at(decoded, self.names_field, []))]
        if self.names is None:
            self.names = names
        key = tuple(names)
        if key != tuple(self.names):
            if sorted(names) != sorted(self.names):
                gone = sorted(set(self.names) - set(names))
                new = sorted(set(names) - set(self.names))
                changes = [f"gone: {', '.join(gone)}"] if gone else []
                changes += [f"new: {', '.join(new)}"] if new else []
                raise MessageFamilyError(
                    ReasonCode.SCHEMA_DRIFT,
                    f"{self.topic}: message {index} names other entries than the episode's first "
                    f"({'; '.join(changes)})",
                    frame=index,
                )
            if key not in self._order:
                position = {n: i for i, n in enumerate(names)}
                self._order[key] = [position[n] for n in self.names]
        order = self._order.get(key)
        for name, value in list(record.items()):
            if not isinstance(value, list):
                continue
            if len(value) != len(names):
                raise MessageFamilyError(
                    ReasonCode.SCHEMA_DRIFT,
                    f"{self.topic}: message {index} has {len(value)} {name} values for {len(names)} names",
                    frame=index,
                )
            if order is not None:
                record[name] = [value[i] for i in order]
