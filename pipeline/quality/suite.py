"""The pre-gate's machinery: check outcomes, the one-state decision, and Great Expectations plumbing.

A check is one expectation over one table (``streams``: a row per topic or video stream; ``episode``: one
row) whose failure means one :class:`~pipeline.enums.ReasonCode`. Suites run in an ephemeral, in-memory GX
context built once per process (importing and building it costs seconds; validating a table costs
milliseconds). Results are asked for in GX's ``COMPLETE`` format, so a failed check names the exact rows
(topics) that broke it rather than guessing them from their values.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pipeline.enums import REASON_SEVERITY, CheckStatus, FileState, ReasonCode, Severity

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.config import QualityPre

log = logging.getLogger(__name__)

#: The tables every suite validates; one GX asset each.
TABLES = ("streams", "episode")
#: At most this many offending rows are named in a check's detail (all are counted).
DETAIL_ROWS = 5


@dataclass(frozen=True)
class CheckOutcome:
    """One check on one input: stored as a check result row."""

    name: str
    status: CheckStatus
    reason: ReasonCode | None = None
    severity: Severity | None = None
    observed: Mapping[str, Any] = field(default_factory=dict)
    detail: str | None = None

    @property
    def failed(self) -> bool:
        return self.status is not CheckStatus.PASSED and self.reason is not None


@dataclass(frozen=True)
class Verdict:
    """The one state an input ends in, the reason codes that put it there and a human-readable detail."""

    state: FileState
    reasons: tuple[ReasonCode, ...]
    detail: str | None


#: Explains a failed check from the table and the row labels GX reported: returns the detail text.
Explain = Callable[["pd.DataFrame", Sequence[str]], str]


@dataclass(frozen=True)
class Expect:
    """An expectation, the table it runs on, and the reason code its failure means."""

    name: str
    table: str  # one of TABLES
    kind: str  # GX expectation class name, e.g. "ExpectColumnValuesToBeBetween"
    kwargs: Mapping[str, Any]
    reason: ReasonCode
    explain: Explain | None = None  # default: the column, the offending values and rows, and the bounds
    severity: Severity | None = None  # default: REASON_SEVERITY[reason]


def duration_bounds(pre: QualityPre) -> Expect:
    """The episode's (or clip's) duration within the vendor's bounds: the same check for logs and videos."""
    return Expect(
        "duration_bounds",
        "episode",
        "ExpectColumnValuesToBeBetween",
        {"column": "duration_s", "min_value": pre.min_duration_s, "max_value": pre.max_duration_s},
        ReasonCode.DURATION_OUT_OF_BOUNDS,
        explain=lambda f, labels: (
            f"duration {f['duration_s'].iloc[0]:.3f} s; allowed "
            f"{pre.min_duration_s:g}..{pre.max_duration_s:g} s"
        ),
    )


def decide(outcomes: Iterable[CheckOutcome]) -> Verdict:
    """The one state an input ends in: any quarantine-severity failure quarantines; flags keep it.

    A quarantined input lists only the codes that quarantined it (the flags it may also carry are in its
    stored check results); an input with flags only is ``accepted_with_flags`` with every flag.
    """
    failed = [o for o in outcomes if o.failed]
    quarantine = [o for o in failed if _severity(o) is Severity.QUARANTINE]
    chosen = quarantine or failed
    reasons = tuple(dict.fromkeys(o.reason for o in chosen if o.reason is not None))
    detail = "; ".join(f"{o.reason}: {o.detail}" for o in chosen if o.detail) or None
    if quarantine:
        return Verdict(FileState.QUARANTINED, reasons, detail)
    if failed:
        return Verdict(FileState.ACCEPTED_WITH_FLAGS, reasons, detail)
    return Verdict(FileState.ACCEPTED, (), None)


def _severity(outcome: CheckOutcome) -> Severity:
    assert outcome.reason is not None
    return outcome.severity or REASON_SEVERITY[outcome.reason]


def failed_outcome(
    name: str,
    reason: ReasonCode,
    detail: str,
    *,
    severity: Severity | None = None,
    observed: Mapping[str, Any] | None = None,
) -> CheckOutcome:
    """A failed check: ``failed`` when it quarantines, ``warned`` when it only flags."""
    sev = severity or REASON_SEVERITY[reason]
    status = CheckStatus.FAILED if sev is Severity.QUARANTINE else CheckStatus.WARNED
    return CheckOutcome(name, status, reason, sev, observed=dict(observed or {}), detail=detail)


def finding_outcomes(
    prefix: str,
    findings: Sequence[tuple[ReasonCode, str, Severity | None, bool, str | None]],
    *,
    gate_decided: frozenset[ReasonCode],
) -> list[CheckOutcome]:
    """Probe findings ``(code, detail, severity, fatal, topic)`` as checks named ``<prefix>.<code>``.

    Codes in ``gate_decided`` are left out: the gate judges those itself from the measurements, against
    the vendor's thresholds. A passed ``<prefix>.structure`` check stands for "no finding" so that every
    input has at least one stored check result.
    """
    outcomes = []
    for code, detail, severity, fatal, topic in findings:
        if code in gate_decided:
            continue
        sev = Severity.QUARANTINE if fatal else (severity or REASON_SEVERITY[code])
        outcomes.append(
            failed_outcome(
                f"{prefix}.{code.value}",
                code,
                detail,
                severity=sev,
                observed={"topic": topic} if topic else {},
            )
        )
    if not outcomes:
        outcomes.append(CheckOutcome(f"{prefix}.structure", CheckStatus.PASSED))
    return outcomes


@lru_cache(maxsize=1)
def _batch_definitions() -> dict[str, Any]:
    """An in-memory (ephemeral) GX context with one pandas asset per table; built once per process."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX announces its temporary docs folder at INFO on every context; the gate's own results are what matter.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("sluice_pregate")
    return {
        table: source.add_dataframe_asset(table).add_batch_definition_whole_dataframe(f"{table}_all")
        for table in TABLES
    }


def warm_up() -> None:
    """Import GX and build its context now (a worker's ``setup``), not inside the first item's timing."""
    _batch_definitions()


def run_suite(expectations: Sequence[Expect], tables: Mapping[str, pd.DataFrame]) -> list[CheckOutcome]:
    """Validate each table against its expectations; one outcome per expectation, in the order given."""
    batch_defs = _batch_definitions()
    by_name: dict[str, CheckOutcome] = {}
    for table, frame in tables.items():
        wanted = [e for e in expectations if e.table == table]
        if not wanted:
            continue
        batch = batch_defs[table].get_batch(batch_parameters={"dataframe": frame})
        # Two passes: pass/fail for all (cheap), then the offending rows for the few that failed. Asking
        # for COMPLETE results up front doubles the cost of every input, and most inputs pass.
        first = batch.validate(_suite(table, wanted), result_format="BOOLEAN_ONLY")
        failed = []
        for e, r in zip(wanted, first.results, strict=True):
            if r.success:
                by_name[e.name] = CheckOutcome(e.name, CheckStatus.PASSED)
            else:
                failed.append(e)
        if failed:
            second = batch.validate(_suite(table, failed), result_format="COMPLETE")
            for e, r in zip(failed, second.results, strict=True):
                by_name[e.name] = _outcome(e, r.success, r.result, frame)
    return [by_name[e.name] for e in expectations if e.name in by_name]


def _suite(table: str, expectations: Sequence[Expect]) -> Any:
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name=f"pregate_{table}")
    for e in expectations:
        suite.add_expectation(getattr(gxe, e.kind)(**e.kwargs))
    return suite


def _outcome(e: Expect, success: bool, result: Mapping[str, Any], frame: pd.DataFrame) -> CheckOutcome:
    rows = [int(i) for i in result.get("unexpected_index_list") or []]
    labels = _row_labels(frame, rows)
    observed: dict[str, Any] = {}
    if "observed_value" in result and result["observed_value"] is not None:
        observed["observed_value"] = result["observed_value"]
    if result.get("partial_missing_list"):
        observed["missing"] = list(result["partial_missing_list"])
    if rows:
        observed["unexpected_count"] = result.get("unexpected_count", len(rows))
        observed["unexpected"] = dict(zip(labels, result.get("unexpected_list") or [], strict=False))
    observed = _jsonable(observed)
    if success:
        return CheckOutcome(e.name, CheckStatus.PASSED, observed=observed)
    detail = e.explain(frame, labels) if e.explain is not None else _describe(e, observed, labels)
    return failed_outcome(e.name, e.reason, detail, severity=e.severity, observed=observed)


def _row_labels(frame: pd.DataFrame, rows: Sequence[int]) -> list[str]:
    if "topic" in frame.columns:
        return [str(frame["topic"].iloc[i]) for i in rows]
    return [f"row {i}" for i in rows]


def _describe(e: Expect, observed: Mapping[str, Any], labels: Sequence[str]) -> str:
    column = e.kwargs.get("column")
    bounds = ", ".join(f"{k} {v!r}" for k, v in e.kwargs.items() if k != "column")
    if "missing" in observed:
        return f"{column} lacks {', '.join(map(str, observed['missing']))}"
    if labels:
        values = observed.get("unexpected", {})
        shown = ", ".join(f"{label}: {values.get(label)!r}" for label in labels[:DETAIL_ROWS])
        more = f" (+{len(labels) - DETAIL_ROWS} more)" if len(labels) > DETAIL_ROWS else ""
        return f"{column} {shown}{more}; allowed {bounds}"
    return f"{column or 'rows'} {observed.get('observed_value')!r}; allowed {bounds}"


def _jsonable(value: Any) -> Any:
    """numpy scalars, NaN and tuples as plain JSON values (check results are stored as JSONB)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
