"""Validation shared by the catalog writers: refuse bad values before they reach the database."""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import TypeVar

from pipeline.catalog.errors import CatalogValueError
from pipeline.catalog.models import SHA256_PATTERN
from pipeline.errors import UnknownChoiceError

E = TypeVar("E", bound=StrEnum)

_SHA256 = re.compile(SHA256_PATTERN)


def member(enum: type[E], value: E | str, what: str) -> E:
    """``value`` as a member of ``enum``; an unknown value names the allowed ones."""
    try:
        return enum(value)
    except ValueError:
        raise UnknownChoiceError(what, value, [m.value for m in enum]) from None


def optional_member(enum: type[E], value: E | str | None, what: str) -> E | None:
    return None if value is None else member(enum, value, what)


def members(enum: type[E], values: Iterable[E | str], what: str) -> list[str]:
    """Distinct values, sorted: the canonical form of a set stored as an array."""
    return sorted({member(enum, v, what).value for v in values})


def sha256_hex(value: str) -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise CatalogValueError("sha256", value, "64 lower-case hex digits")
    return value


def nonnegative(value: int, what: str) -> int:
    if value < 0:
        raise CatalogValueError(what, value, "an integer >= 0")
    return value


def nonempty(value: str, what: str) -> str:
    if not value:
        raise CatalogValueError(what, value, "a non-empty string")
    return value
