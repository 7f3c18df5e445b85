"""Resample state and action streams once, onto one fixed-rate grid, with an interpolation per field.

The grid is absolute: its instants are whole multiples of the period since the epoch (``k * 1e9 / rate``
ns), so two episodes at the same rate share grid phases, and it covers only the span every resampled stream
covers (no extrapolation). Fields are interpolated linearly (positions, velocities, efforts, targets)
unless they are discrete: a field named in :data:`PREVIOUS_VALUE_FIELDS`, or holding booleans, integers or
text, takes the previous sample's value (a gripper command holds until the next one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from pipeline.enums import ReasonCode
from pipeline.transcode.errors import TranscodeInputError

Method = Literal["linear", "previous"]

#: Fields that are discrete in meaning even when sent as floats: the gripper is open or closed.
PREVIOUS_VALUE_FIELDS: frozenset[str] = frozenset({"gripper", "gripper_command", "mode", "state"})
#: Decimals kept in resampled values: 1e-9 of a field's unit, far below any sensor's resolution.
RESAMPLE_DECIMALS = 9
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Series:
    """One stream as arrays: ``stamps_ns`` ascending, one record (decoded message) per stamp."""

    topic: str
    stamps_ns: np.ndarray
    records: Sequence[Mapping[str, Any]]
    stamp_field: str | None = None


@dataclass(frozen=True)
class Resampled:
    topic: str
    stamps_ns: np.ndarray
    records: list[dict[str, Any]]
    methods: dict[str, Method]


def clean_series(series: Series) -> Series:
    """Sorted by stamp, repeated stamps dropped (first kept): interpolation needs strictly rising times."""
    order = np.argsort(series.stamps_ns, kind="stable")
    stamps = series.stamps_ns[order]
    keep = np.ones(len(stamps), dtype=bool)
    keep[1:] = stamps[1:] != stamps[:-1]
    idx = order[keep]
    return Series(series.topic, series.stamps_ns[idx], [series.records[i] for i in idx], series.stamp_field)


def field_methods(
    records: Sequence[Mapping[str, Any]], stamp_field: str | None, topic: str = "stream"
) -> dict[str, Method]:
    """The interpolation of each field of a stream (the stamp field itself is replaced by the grid time).

    A field is ``linear`` when every record holds a number there (or a list of numbers of one length) and
    at least one of them is a float, judged over all records: JSON writers print 0.0 as ``0``, so a joint
    whose first sample is exactly zero would otherwise be held step-wise. Fields named in
    :data:`PREVIOUS_VALUE_FIELDS` and any other value hold the previous sample. A field missing from a
    record, or a numeric vector that changes length, raises :class:`TranscodeInputError` (``schema_drift``).
    """
    methods: dict[str, Method] = {}
    for name in records[0]:
        if name == stamp_field:
            continue
        values = []
        for i, record in enumerate(records):
            if name not in record:
                raise TranscodeInputError(
                    ReasonCode.SCHEMA_DRIFT, f"{topic}: record {i} has no field {name!r} (record 0 has)"
                )
            values.append(record[name])
        numeric = _numeric_with_float(values, f"{topic}.{name}")
        methods[name] = "linear" if name not in PREVIOUS_VALUE_FIELDS and numeric else "previous"
    return methods


def _numeric_type(kind: type) -> bool:
    return issubclass(kind, int | float) and not issubclass(kind, bool)


def _numeric_with_float(values: Sequence[Any], what: str) -> bool:
    """True when ``values`` are all numbers, or all lists of numbers of one length, and any is a float.

    Judged on the set of types seen rather than value by value: a stream of 2,000 seven-joint vectors
    is 14,000 values, and a call per value was the largest item of the resample under the profiler.
    """
    kinds = {type(v) for v in values}
    if all(_numeric_type(k) for k in kinds):
        return any(issubclass(k, float) for k in kinds)
    if not all(issubclass(k, list) for k in kinds) or not all(values):
        return False
    element_kinds = {type(x) for v in values for x in v}
    if not all(_numeric_type(k) for k in element_kinds):
        return False
    lengths = {len(v) for v in values}
    if len(lengths) > 1:
        raise TranscodeInputError(
            ReasonCode.SCHEMA_DRIFT,
            f"{what}: a numeric vector of {sorted(lengths)} elements from record to record",
        )
    return any(issubclass(k, float) for k in element_kinds)


def grid(series: Sequence[Series], rate_hz: float) -> np.ndarray:
    """The grid instants (ns) at ``rate_hz`` inside the span that every series covers."""
    rate = Fraction(rate_hz).limit_denominator(1_000_000)
    start = max(int(s.stamps_ns[0]) for s in series)
    end = min(int(s.stamps_ns[-1]) for s in series)
    first_k = math.ceil(Fraction(start) * rate / NS_PER_S)
    last_k = math.floor(Fraction(end) * rate / NS_PER_S)
    if last_k < first_k:
        return np.zeros(0, dtype=np.int64)
    return np.array([grid_instant(k, rate) for k in range(first_k, last_k + 1)], dtype=np.int64)


def grid_instant(k: int, rate: Fraction) -> int:
    """The ``k``-th instant (ns since the epoch) of the grid at ``rate`` Hz: ``k * 1e9 / rate`` rounded
    half up, in integers (exact for any ``k`` and rate)."""
    return (2 * k * NS_PER_S * rate.denominator + rate.numerator) // (2 * rate.numerator)


def _column(records: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
    return np.asarray([r[name] for r in records], dtype=np.float64)


def interpolate(
    series: Series, at_ns: np.ndarray, methods: Mapping[str, Method]
) -> dict[str, np.ndarray | list[Any]]:
    """Each field of ``series`` at the instants ``at_ns`` (inside its span), by its method."""
    t = series.stamps_ns.astype(np.float64)
    x = at_ns.astype(np.float64)
    previous = np.clip(np.searchsorted(series.stamps_ns, at_ns, side="right") - 1, 0, len(t) - 1)
    out: dict[str, np.ndarray | list[Any]] = {}
    for name, method in methods.items():
        if method == "linear":
            column = _column(series.records, name)
            if column.ndim == 1:
                out[name] = np.interp(x, t, column)
            else:
                out[name] = np.stack([np.interp(x, t, column[:, j]) for j in range(column.shape[1])], axis=1)
        else:
            out[name] = [series.records[i][name] for i in previous]
    return out


def resample(series: Series, at_ns: np.ndarray) -> Resampled:
    """``series`` on the grid ``at_ns``: one record per instant, the stamp field set to the instant."""
    series = clean_series(series)
    methods = field_methods(series.records, series.stamp_field, series.topic)
    values = interpolate(series, at_ns, methods)
    rounded = {
        k: np.round(v, RESAMPLE_DECIMALS).tolist() if isinstance(v, np.ndarray) else v
        for k, v in values.items()
    }
    records: list[dict[str, Any]] = []
    names = list(series.records[0].keys())
    for i, stamp in enumerate(at_ns.tolist()):
        record: dict[str, Any] = {}
        for name in names:
            if name == series.stamp_field:
                record[name] = stamp
            elif name in rounded:
                record[name] = rounded[name][i]
        records.append(record)
    return Resampled(series.topic, at_ns, records, methods)


def resample_rmse(
    native: Series,
    resampled_stamps_ns: np.ndarray,
    resampled_records: Sequence[Mapping[str, Any]],
    methods: Mapping[str, Method],
) -> dict[str, float]:
    """RMS difference, per field (in its own units), between resampled values and the native stream
    interpolated at the same instants by the recorded method; a ``previous`` field counts 1 per mismatch.

    An instant outside the native stream's span counts as an error of ``inf`` (the grid was not inside).
    """
    native = clean_series(native)
    if len(resampled_stamps_ns) == 0:
        return {}
    inside = (resampled_stamps_ns >= native.stamps_ns[0]) & (resampled_stamps_ns <= native.stamps_ns[-1])
    if not inside.all():
        return {name: math.inf for name in methods}
    expected = interpolate(native, resampled_stamps_ns, methods)
    errors: dict[str, float] = {}
    for name, method in methods.items():
        got = [r.get(name) for r in resampled_records]
        if method == "linear":
            try:
                diff = np.asarray(got, dtype=np.float64) - np.asarray(expected[name], dtype=np.float64)
            except (TypeError, ValueError):
                errors[name] = math.inf
                continue
            errors[name] = float(np.sqrt(np.mean(diff**2)))
        else:
            mismatches = sum(1 for a, b in zip(got, expected[name], strict=True) if a != b)
            errors[name] = math.sqrt(mismatches / len(got))
    return errors
