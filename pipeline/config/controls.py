"""Which quality checks a config setting tunes: metadata on the config fields, read by the generated docs.

A setting that a check compares against (a threshold, an allow-list, a limit) declares it on its field::

    max_gap_rate: float = Field(default=0.02, ..., json_schema_extra=controls((Gate.PRE, "max_gap_rate",
                                                                              ReasonCode.GAP_RATE_HIGH)))

``check`` is the check name stored with each result (``sluice quarantine list``, the warehouse's
``latest_checks``): a pre-gate expectation name (``max_gap_rate``), a probe finding (``mcap.record_too_large``, ``video.letterboxed``) or a post-gate check
(``psnr``). The declaration is metadata only: it changes neither validation nor the config hash. Tests keep it
honest (``tests/quality/test_quality_controls.py``): every declared pair is shown to make its reason appear
and disappear when the setting crosses the measured figure, and every expectation whose arguments a setting
changes must be declared.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic.fields import FieldInfo

from pipeline.enums import Gate, ReasonCode

#: The key under ``json_schema_extra`` (it also shows in ``sluice vendor schema``).
CONTROLS_KEY = "controls"


class Control(NamedTuple):
    """One check a setting tunes: the gate that runs it, its stored name, the reason its failure means."""

    gate: Gate
    check: str
    reason: ReasonCode


def controls(*entries: tuple[Gate, str, ReasonCode]) -> dict[str, Any]:
    """``json_schema_extra`` for a field that tunes these ``(gate, check, reason)`` checks."""
    return {
        CONTROLS_KEY: [
            {"gate": Gate(gate).value, "check": check, "reason": ReasonCode(reason).value}
            for gate, check, reason in entries
        ]
    }


def field_controls(info: FieldInfo) -> tuple[Control, ...]:
    """The checks a field declares it tunes (none for most fields)."""
    extra = info.json_schema_extra
    if not isinstance(extra, dict):
        return ()
    entries = extra.get(CONTROLS_KEY)
    if not isinstance(entries, list):
        return ()
    return tuple(
        Control(Gate(str(e["gate"])), str(e["check"]), ReasonCode(str(e["reason"])))
        for e in entries
        if isinstance(e, dict)
    )


__all__ = ["CONTROLS_KEY", "Control", "controls", "field_controls"]
