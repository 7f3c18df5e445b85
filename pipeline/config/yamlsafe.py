"""A strict, hostile-safe YAML reader for configuration files.

PyYAML's loaders construct Python objects from a node graph: aliases are expanded (a few hundred bytes of
nested aliases become gigabytes), tags select constructors, and YAML 1.1's resolver silently turns ``NO``
into ``False``, ``0123`` into ``83`` and ``1:30`` into ``90``. This module never constructs anything from
YAML: it walks PyYAML's *event stream* (the libyaml parser, no composer, no constructor) and builds plain
JSON-like data itself, so that

* the first anchor or alias ends the read (:class:`YamlRefused`) before anything is expanded;
* a tag (``!!python/object``, ``!!str``, ``!foo``) is a problem, never a constructor call;
* plain scalars are typed only where YAML 1.1 and YAML 1.2 agree (``true``/``false``, ``null``, decimal
  integers and floats); a plain scalar the two versions read differently (``yes``, ``NO``, ``on``,
  ``0123``, ``0x1F``, ``1_000``, ``1:30``, ``2024-01-01``, ``1e5``) is a problem at its key path, so the
  file means the same to every YAML reader; everything else is a string;
* duplicate keys, non-string keys, complex keys, several documents and deep nesting are refused.

The caller validates the data with pydantic in strict mode, so that ``1.10`` given to a string field is an
error instead of the string ``"1.1"``; :attr:`YamlTree.scalars` keeps each scalar's source text and line so
that the error can say what was written and how to quote it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from pipeline.config.types import Loc, format_loc

#: Deepest nesting accepted; a vendor file needs about six levels.
MAX_DEPTH = 32

# libyaml's parser when PyYAML was built with it (the wheels are), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlRefused(Exception):
    """The document is refused outright (alias, anchor, syntax error, several documents, too deep)."""

    def __init__(self, loc: Loc, line: int | None, message: str) -> None:
        self.loc = loc
        self.line = line
        self.message = message
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass(frozen=True)
class ScalarInfo:
    """Where a scalar came from: its text as written, 1-based line, and whether it was plain (unquoted)."""

    text: str
    line: int
    plain: bool


@dataclass
class YamlTree:
    """The parsed document: data, per-location source info, and the problems found while parsing."""

    data: Any = None
    scalars: dict[Loc, ScalarInfo] = field(default_factory=dict)
    lines: dict[Loc, int] = field(default_factory=dict)
    problems: list[tuple[Loc, str]] = field(default_factory=list)

    def line_of(self, loc: Loc) -> int | None:
        """The line of ``loc`` or of its nearest ancestor known."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None


# --- plain scalar resolution -------------------------------------------------------------------------------

_NULL = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
_INF_NAN = {
    ".inf",
    ".Inf",
    ".INF",
    "+.inf",
    "+.Inf",
    "+.INF",
    "-.inf",
    "-.Inf",
    "-.INF",
    ".nan",
    ".NaN",
    ".NAN",
}
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
# A float both versions read alike: a dot, and an exponent (if any) with a sign (YAML 1.1 requires both).
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+][0-9]+)?")
# YAML 1.2 core floats; those not matching _FLOAT (1e5, 1.0e5) are strings to YAML 1.1.
_FLOAT_12 = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")

_AMBIGUOUS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF"),
        "write true or false for a boolean, or quote it for text",
    ),
    (re.compile(r"[-+]?0[0-9_]+"), "write a decimal number without leading zeros, or quote it for text"),
    (re.compile(r"[-+]?0[xXoObB][0-9a-fA-F_]+"), "write a decimal number, or quote it for text"),
    (re.compile(r"[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?"), "write the number without '_', or quote it for text"),
    (
        re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"),
        "quote it (YAML 1.1 reads base-60 numbers)",
    ),
    (re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt \t].*)?"), "quote it (YAML 1.1 reads dates)"),
    (re.compile(r"=|<<"), "quote it"),
]


def _yaml11_reading(text: str) -> str:
    """How PyYAML's YAML 1.1 safe loader would read a plain scalar, for the error message."""
    try:
        value = yaml.safe_load(text) if len(text) <= 100 else text
    except yaml.YAMLError:
        return "something other than this text"
    except ValueError:  # e.g. an impossible date
        return "a date"
    return f"{type(value).__name__} {value!r}"


def resolve_plain(text: str) -> tuple[Any, str | None]:
    """Type a plain scalar where YAML 1.1 and 1.2 agree; otherwise ``(text, problem)``."""
    if text in _NULL:
        return None, None
    if text in _TRUE:
        return True, None
    if text in _FALSE:
        return False, None
    if _INT.fullmatch(text):
        return int(text), None
    if _FLOAT.fullmatch(text):
        return float(text), None
    if text in _INF_NAN:  # .inf, -.Inf, .NaN ...: Python spells them without the dot
        return float(text.lower().replace(".", "")), None
    for pattern, advice in _AMBIGUOUS:
        if pattern.fullmatch(text):
            return text, (
                f"ambiguous plain scalar {text!r}: YAML 1.1 reads it as {_yaml11_reading(text)}; {advice}"
            )
    if _FLOAT_12.fullmatch(text):
        return text, (
            f"ambiguous plain scalar {text!r}: YAML 1.2 reads it as a float, YAML 1.1 as a string; "
            f"write it with a dot and a signed exponent (1.0e+5), or quote it for text"
        )
    return text, None


# --- event walk --------------------------------------------------------------------------------------------

_DISCARD = object()  # marks the value of a duplicate key: parsed (for syntax), then dropped


@dataclass
class _Frame:
    container: dict[str, Any] | list[Any]
    loc: Loc
    discard: bool
    pending_key: Any = None  # None: expecting a key (mappings only)
    key_lines: dict[str, int] = field(default_factory=dict)


def _line(event: yaml.Event) -> int:
    return event.start_mark.line + 1 if event.start_mark is not None else 0


def parse_strict_yaml(text: str) -> YamlTree:
    """Parse one YAML document into JSON-like data without expanding, constructing or guessing anything.

    Raises :class:`YamlRefused` for a document that cannot be read safely at all; returns every other
    problem in :attr:`YamlTree.problems`.
    """
    tree = YamlTree()
    stack: list[_Frame] = []
    documents = 0
    root_seen = False
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            loc_here = stack[-1].loc if stack else ()
            if isinstance(event, yaml.AliasEvent):
                raise YamlRefused(loc_here, _line(event), f"aliases are not allowed (found *{event.anchor})")
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                raise YamlRefused(loc_here, _line(event), f"anchors are not allowed (found &{anchor})")
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise YamlRefused(
                        (), _line(event), "a config file holds one YAML document; found a second"
                    )
                continue
            if isinstance(event, yaml.StreamStartEvent | yaml.StreamEndEvent | yaml.DocumentEndEvent):
                continue
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                stack.pop()
                continue
            if not isinstance(event, yaml.ScalarEvent | yaml.MappingStartEvent | yaml.SequenceStartEvent):
                raise YamlRefused(loc_here, _line(event), f"unexpected YAML event {type(event).__name__}")
            top = stack[-1] if stack else None
            if isinstance(top, _Frame) and isinstance(top.container, dict) and top.pending_key is None:
                _take_key(tree, top, event)
                continue
            _take_value(tree, stack, event)
            root_seen = True
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlRefused((), line, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise YamlRefused((), None, f"not valid YAML: {exc}") from None
    if not root_seen or tree.data is None:
        raise YamlRefused((), None, "the file is empty: a config file is a mapping of keys")
    return tree


def _take_key(tree: YamlTree, frame: _Frame, event: yaml.Event) -> None:
    line = _line(event)
    if not isinstance(event, yaml.ScalarEvent):
        raise YamlRefused(
            frame.loc, line, "complex mapping keys (a list or mapping used as a key) are not allowed"
        )
    text = event.value
    loc = (*frame.loc, text)
    if event.tag is not None:
        tree.problems.append((loc, f"YAML tags are not allowed (found {event.tag!r} on key {text!r})"))
    elif event.style in (None, ""):
        value, problem = resolve_plain(text)
        if problem:
            tree.problems.append((loc, problem))
        elif not isinstance(value, str):
            tree.problems.append(
                (loc, f"key {text!r} is read as {type(value).__name__}; keys must be text: quote it")
            )
    assert isinstance(frame.container, dict)
    if text in frame.container or text in frame.key_lines:
        first = frame.key_lines.get(text)
        tree.problems.append(
            (loc, f"duplicate key {text!r} (first at line {first}); the file must say it once")
        )
        frame.pending_key = _DISCARD
        return
    frame.key_lines[text] = line
    if not frame.discard:
        tree.lines[loc] = line
    frame.pending_key = text


def _take_value(tree: YamlTree, stack: list[_Frame], event: yaml.Event) -> None:
    line = _line(event)
    top = stack[-1] if stack else None
    discard = False
    if top is None:
        loc: Loc = ()
    elif isinstance(top.container, list):
        loc = (*top.loc, len(top.container))
        discard = top.discard
    else:
        discard = top.discard or top.pending_key is _DISCARD
        loc = (*top.loc, top.pending_key) if top.pending_key is not _DISCARD else (*top.loc, "<duplicate>")
    tag = getattr(event, "tag", None)
    if tag is not None and not discard:
        tree.problems.append((loc, f"YAML tags are not allowed (found {tag!r})"))
    value: Any
    if isinstance(event, yaml.ScalarEvent):
        plain = event.style in (None, "") and tag is None
        if plain:
            value, problem = resolve_plain(event.value)
            if problem and not discard:
                tree.problems.append((loc, problem))
        else:
            value = event.value
        if not discard:
            tree.scalars[loc] = ScalarInfo(text=event.value, line=line, plain=plain)
    else:
        if len(stack) >= MAX_DEPTH:
            raise YamlRefused(loc, line, f"nested deeper than {MAX_DEPTH} levels")
        value = {} if isinstance(event, yaml.MappingStartEvent) else []
    if not discard:
        tree.lines.setdefault(loc, line)
    if top is None:
        tree.data = value
    elif isinstance(top.container, list):
        top.container.append(value)
    else:
        if top.pending_key is not _DISCARD:
            top.container[top.pending_key] = value
        top.pending_key = None
    if isinstance(value, dict | list) and not isinstance(event, yaml.ScalarEvent):
        stack.append(_Frame(container=value, loc=loc, discard=discard))


def describe_loc(loc: Loc) -> str:
    """Key path for messages (``<root>`` for the document itself)."""
    return format_loc(loc) or "<root>"
