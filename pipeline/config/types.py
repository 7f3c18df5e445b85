"""Field types and helpers shared by the vendor-config models.

The models validate themselves whether they come from YAML (through :mod:`pipeline.config.loader`) or are
built in Python (tests, the DAG factory). Checks that span several fields raise :func:`raise_problems`, whose
error carries each problem's key path relative to the model so that the loader can report the full path
(``steps.transcode.pool``) instead of the model's own location.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ByteSize, ConfigDict, Field, Strict
from pydantic_core import PydanticCustomError

#: Error type of a cross-field problem; ``ctx["problems"]`` holds ``(relative_loc, message)`` pairs.
CROSS_FIELD_ERROR = "config_cross_field"

Loc = tuple[str | int, ...]

_SLUG = re.compile(r"[a-z][a-z0-9_]{0,62}")


class FrozenModel(BaseModel):
    """Base of every config model: immutable, unknown keys refused, no NaN or infinity, strict scalars.

    Strict: a string field refuses ``1.1`` (what YAML makes of ``1.10``), a boolean refuses ``"yes"``, an
    integer refuses ``2.0`` and ``true``; a float accepts an integer. Lists and enum values are the only
    coercions allowed (mark such fields with :data:`Lax`), so that YAML lists and enum words validate.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, strict=True)


#: Put on tuple and enum fields: a YAML list becomes a tuple, a word becomes its enum member.
Lax = Strict(False)


def config_error(kind: str, message: str) -> PydanticCustomError:
    """A validation error whose message is final (user text in it is never treated as a template)."""
    return PydanticCustomError(kind, "{detail}", {"detail": message})


def _check_slug(value: str) -> str:
    if not _SLUG.fullmatch(value):
        raise config_error(
            "slug",
            f"{value!r} is not a slug: use 1-63 lowercase letters, digits and underscores, "
            "starting with a letter",
        )
    return value


#: A name used as a DAG id, pool name, catalog value or annotator name.
Slug = Annotated[str, AfterValidator(_check_slug)]

#: A byte count; YAML may say ``268435456`` or ``256 MiB`` (binary units) / ``256 MB`` (decimal units).
Bytes = Annotated[ByteSize, Field(ge=0)]
PositiveBytes = Annotated[ByteSize, Field(gt=0)]


def _sorted_unique(values: tuple[Any, ...]) -> tuple[Any, ...]:
    # Allow-lists are sets: sort them so that their order changes neither behaviour nor the config hash.
    return tuple(sorted(set(values), key=str))


#: Put on a ``tuple[...]`` allow-list so that it is kept sorted and de-duplicated (canonical for hashing).
SortedSet = AfterValidator(_sorted_unique)


def _check_relative(value: str, *, what: str, allow_absolute: bool) -> str:
    if not value:
        raise config_error("vendor_path", f"empty {what}")
    if "\x00" in value or "\\" in value:
        raise config_error("vendor_path", f"{what} {value!r} holds a NUL byte or a backslash; use '/'")
    path = PurePosixPath(value)
    if ".." in path.parts:
        raise config_error(
            "vendor_path", f"{what} {value!r} contains '..': paths must stay inside the vendor root"
        )
    if path.is_absolute() and not allow_absolute:
        raise config_error(
            "vendor_path", f"{what} {value!r} is absolute: write it relative to the vendor root"
        )
    return value


def _glob(value: str) -> str:
    return _check_relative(value, what="glob", allow_absolute=False)


def _file_name(value: str) -> str:
    _check_relative(value, what="file name", allow_absolute=False)
    if "/" in value or value in {".", ".."}:
        raise config_error("vendor_path", f"{value!r} must be a bare file name, not a path")
    return value


def _vendor_path(value: str) -> str:
    # Absolute paths are accepted here only so that the loader can say whether they fall inside the root.
    return _check_relative(value, what="path", allow_absolute=True)


#: A glob relative to the vendor root (no ``..``, not absolute).
Glob = Annotated[str, AfterValidator(_glob)]
#: A bare file name (no ``/``).
FileName = Annotated[str, AfterValidator(_file_name)]
#: A path inside the vendor root; the loader resolves symlinks and refuses anything that lands outside.
VendorPath = Annotated[str, AfterValidator(_vendor_path)]


def raise_problems(problems: Sequence[tuple[Loc, str]]) -> None:
    """Raise one validation error carrying several cross-field problems, each at its own relative key path."""
    if not problems:
        return
    summary = "; ".join(f"{format_loc(loc) or '<here>'}: {message}" for loc, message in problems)
    # "problems" comes first: the template is filled key by key, and user text in the summary must not be
    # filled again.
    raise PydanticCustomError(
        CROSS_FIELD_ERROR, "{summary}", {"problems": list(problems), "summary": summary}
    )


def format_loc(loc: Iterable[str | int]) -> str:
    """``("steps", "transcode", "cpus")`` → ``steps.transcode.cpus``; list indices as ``[i]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_\-/*]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def deep_merge(defaults: dict[str, Any], override: Any) -> Any:
    """Overlay a user's partial mapping on defaults (nested mappings merged, everything else replaced).

    A non-mapping override is returned as is, so that validation reports it instead of it being hidden.
    """
    if not isinstance(override, dict):
        return override
    merged = dict(defaults)
    for key, value in override.items():
        base = merged.get(key)
        merged[key] = deep_merge(base, value) if isinstance(base, dict) else value
    return merged
