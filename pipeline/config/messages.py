"""Turn pydantic validation errors into ``(key path, message)`` problems a person can act on.

Each message names the bad value and what was allowed: the allowed keys for an unknown key, the allowed
values for an enum, and for a YAML scalar that became the wrong type, what was written and how to quote it.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pipeline.config.types import CROSS_FIELD_ERROR, Loc
from pipeline.config.yamlsafe import YamlTree

_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "none_required": "null",
}


_CONSTRAINTS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "multiple_of",
    "finite_number",
    "too_short",
    "too_long",
    "string_too_short",
    "string_too_long",
}


def describe_value(value: Any) -> str:
    """A short, typed description of a validated input (``the float 1.1``)."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the {'integer' if isinstance(value, int) else 'number'} {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def validation_problems(
    exc: ValidationError, model: type[BaseModel], tree: YamlTree | None = None
) -> list[tuple[Loc, str]]:
    """One ``(loc, message)`` per error; cross-field errors expand to their own key paths."""
    problems: list[tuple[Loc, str]] = []
    errors = exc.errors(include_url=False)
    failed = [tuple(error["loc"]) for error in errors]
    for error in errors:
        loc: Loc = tuple(error["loc"])
        if error["type"] == "too_short" and any(
            len(other) > len(loc) and other[: len(loc)] == loc for other in failed
        ):
            continue  # a list emptied by its own bad items: the items are the problem

        if error["type"] == CROSS_FIELD_ERROR:
            for relative, message in error.get("ctx", {}).get("problems", []):
                problems.append(((*loc, *relative), message))
            continue
        key_error = bool(loc) and loc[-1] == "[key]"
        if key_error:
            loc = loc[:-1]
        message = _message(error, loc, model, tree)
        problems.append((loc, f"key: {message}" if key_error else message))
    return problems


def _message(error: Any, loc: Loc, model: type[BaseModel], tree: YamlTree | None) -> str:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = allowed_keys(model, loc[:-1])
        listing = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"unknown key {loc[-1]!r}{listing}"
    if kind == "missing":
        return f"required key {loc[-1]!r} is missing" if loc else "required value is missing"
    if kind in ("enum", "literal_error"):
        return f"{value!r} is not allowed; allowed: {ctx.get('expected', '?')}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {describe_value(value)}{_yaml_hint(kind, value, loc, tree)}"
    if kind in ("byte_size", "byte_size_unit"):
        return (
            "expected a byte count such as 4294967296 or '4 GiB' "
            f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got {describe_value(value)}"
        )
    message = str(error["msg"])
    if kind == "value_error" and message.startswith("Value error, "):
        return message.removeprefix("Value error, ")
    if kind in _CONSTRAINTS:
        return f"{message[:1].lower()}{message[1:]}, got {describe_value(value)}"
    return message


def _yaml_hint(kind: str, value: Any, loc: Loc, tree: YamlTree | None) -> str:
    info = tree.scalars.get(loc) if tree is not None else None
    if info is None:
        return ""
    if kind == "string_type" and info.plain and value is not None:
        return (
            f" (YAML reads the plain scalar {info.text} as {describe_value(value)}: quote it, '{info.text}')"
        )
    if kind == "bool_type" and not info.plain:
        return " (write true or false without quotes)"
    if kind in ("int_type", "float_type", "int_from_float") and not info.plain:
        return " (write the number without quotes)"
    return ""


def allowed_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys a mapping at ``loc`` (inside ``model``) accepts; empty if it is not a model."""
    target = _model_at(model, loc)
    return list(target.model_fields) if target is not None else []


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            annotation = field.annotation
            continue
        origin = get_origin(annotation)
        if origin in (tuple, list):
            annotation = get_args(annotation)[0]
        elif origin is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            annotation = options[0] if len(options) == 1 else annotation
            if len(options) != 1:
                return annotation
        else:
            return annotation
