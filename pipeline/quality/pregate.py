"""The quality pre-gate: Great Expectations suites over probe results, plus the vendor contract.

The probes (:mod:`pipeline.mcaplog`, :mod:`pipeline.videoprobe`) measure and report; this module decides.
Each check is one expectation whose failure maps to one :class:`~pipeline.enums.ReasonCode`; structural
findings of the probes (truncation, CRC mismatch, decode errors...) become checks of their own. From the
list of outcomes, :func:`decide` derives the one state the input ends in.

Two tables are validated per input: ``streams`` (one row per topic or video stream: the per-topic figures)
and ``episode`` (one row: ids, time range, calibration). Suites are built from the vendor's thresholds, so
the same code serves every vendor.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pipeline.enums import REASON_SEVERITY, CheckStatus, FileState, ReasonCode, Severity

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.config import VendorConfig
    from pipeline.mcaplog import LogReport
    from pipeline.videoprobe import VideoProbe

log = logging.getLogger(__name__)

#: Timing codes the gate decides itself from vendor thresholds; the reader's own opinion on them is ignored.
GATE_DECIDED = frozenset(
    {
        ReasonCode.NON_MONOTONIC_TIME,
        ReasonCode.DUPLICATE_TIMESTAMPS,
        ReasonCode.CLOCK_JUMP,
        ReasonCode.CLOCK_SKEW,
        ReasonCode.GAP_RATE_HIGH,
        ReasonCode.NO_MESSAGES,
        ReasonCode.TOO_FEW_FRAMES,
        ReasonCode.RESOLUTION_OUT_OF_BOUNDS,
    }
)


@dataclass(frozen=True)
class CheckOutcome:
    """One check on one input: stored as a check result row."""

    name: str
    status: CheckStatus
    reason: ReasonCode | None = None
    severity: Severity | None = None
    observed: Mapping[str, Any] = field(default_factory=dict)
    detail: str | None = None


@dataclass(frozen=True)
class Verdict:
    state: FileState
    reasons: tuple[ReasonCode, ...]
    detail: str | None


@dataclass(frozen=True)
class _Expect:
    """An expectation, the table it runs on, and the reason code its failure means."""

    name: str
    table: str  # "streams" or "episode"
    kind: str  # GE expectation class name
    kwargs: Mapping[str, Any]
    reason: ReasonCode
    severity: Severity | None = None  # default: REASON_SEVERITY[reason]


def decide(outcomes: Iterable[CheckOutcome]) -> Verdict:
    """The one state an input ends in: any quarantine-severity failure quarantines; flags keep it."""
    failed = [o for o in outcomes if o.status is not CheckStatus.PASSED and o.reason is not None]
    quarantine = [o for o in failed if (o.severity or REASON_SEVERITY[o.reason]) is Severity.QUARANTINE]  # type: ignore[index]
    chosen = quarantine or failed
    reasons = tuple(dict.fromkeys(o.reason for o in chosen if o.reason is not None))
    detail = "; ".join(f"{o.reason}: {o.detail}" for o in chosen if o.detail) or None
    if quarantine:
        return Verdict(FileState.QUARANTINED, reasons, detail)
    if failed:
        return Verdict(FileState.ACCEPTED_WITH_FLAGS, reasons, detail)
    return Verdict(FileState.ACCEPTED, (), None)


# -- robot logs --------------------------------------------------------------------------------------------


def mcap_tables(
    report: LogReport, vendor: VendorConfig, *, calibration_id: int | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    import pandas as pd

    contract = vendor.topics
    expected = {spec.topic: spec for spec in contract.all_topics()} if contract else {}
    cameras = {c.topic for c in contract.cameras} if contract else set()
    rows = []
    for t in report.topics:
        skew = [abs(x) for x in (t.skew_min_ns, t.skew_max_ns) if x is not None]
        rows.append(
            {
                "topic": t.topic,
                "role": "camera" if t.topic in cameras else ("contract" if t.topic in expected else "other"),
                "message_encoding": t.message_encoding,
                "message_count": t.message_count,
                "camera_frames": t.message_count if t.topic in cameras else None,
                "gap_rate": t.gap_rate if t.topic in expected else None,
                "backward_steps": t.backward_steps,
                "duplicate_log_times": t.duplicate_log_times,
                "largest_jump_ns": t.largest_jump_ns,
                "abs_skew_max_ns": max(skew) if skew else None,
            }
        )
    streams = pd.DataFrame(
        rows,
        columns=[
            "topic",
            "role",
            "message_encoding",
            "message_count",
            "camera_frames",
            "gap_rate",
            "backward_steps",
            "duplicate_log_times",
            "largest_jump_ns",
            "abs_skew_max_ns",
        ],
    )
    meta = report.metadata_record("episode")
    values = dict(meta.values) if meta is not None else {}
    duration_s = (
        (report.end_ns - report.start_ns) / 1e9
        if report.start_ns is not None and report.end_ns is not None
        else None
    )
    episode = pd.DataFrame(
        [
            {
                "robot_id": values.get("robot_id"),
                "session_id": values.get("session_id"),
                "duration_s": duration_s,
                "calibration_id": calibration_id,
            }
        ]
    )
    return streams, episode


def mcap_expectations(vendor: VendorConfig) -> list[_Expect]:
    pre = vendor.quality.pre
    ts = vendor.timestamps
    contract = vendor.topics
    out = [
        _Expect(
            "has_messages",
            "streams",
            "ExpectTableRowCountToBeBetween",
            {"min_value": 1},
            ReasonCode.NO_MESSAGES,
        ),
        _Expect(
            "max_backward_steps",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "backward_steps", "max_value": ts.max_backward_steps},
            ReasonCode.NON_MONOTONIC_TIME,
        ),
        _Expect(
            "max_duplicate_timestamps",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "duplicate_log_times", "max_value": ts.max_duplicate_timestamps},
            ReasonCode.DUPLICATE_TIMESTAMPS,
        ),
        _Expect(
            "max_clock_jump",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "largest_jump_ns", "max_value": int(ts.max_clock_jump_s * 1e9)},
            ReasonCode.CLOCK_JUMP,
        ),
        _Expect(
            "max_clock_skew",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "abs_skew_max_ns", "max_value": int(ts.max_skew_s * 1e9)},
            ReasonCode.CLOCK_SKEW,
        ),
        _Expect(
            "max_gap_rate",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "gap_rate", "max_value": pre.max_gap_rate},
            ReasonCode.GAP_RATE_HIGH,
        ),
        _Expect(
            "min_camera_frames",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "camera_frames", "min_value": pre.min_frames},
            ReasonCode.TOO_FEW_FRAMES,
        ),
        _Expect(
            "robot_id_present",
            "episode",
            "ExpectColumnValuesToNotBeNull",
            {"column": "robot_id"},
            ReasonCode.MISSING_METADATA,
        ),
        _Expect(
            "session_id_present",
            "episode",
            "ExpectColumnValuesToNotBeNull",
            {"column": "session_id"},
            ReasonCode.MISSING_METADATA,
        ),
        _Expect(
            "calibration_valid",
            "episode",
            "ExpectColumnValuesToNotBeNull",
            {"column": "calibration_id"},
            ReasonCode.NO_CALIBRATION,
        ),
        _Expect(
            "duration_bounds",
            "episode",
            "ExpectColumnValuesToBeBetween",
            {"column": "duration_s", "min_value": pre.min_duration_s, "max_value": pre.max_duration_s},
            ReasonCode.DURATION_OUT_OF_BOUNDS,
        ),
    ]
    if contract is not None:
        required = sorted(spec.topic for spec in contract.all_topics() if spec.required)
        if required:
            out.append(
                _Expect(
                    "required_topics",
                    "streams",
                    "ExpectColumnDistinctValuesToContainSet",
                    {"column": "topic", "value_set": required},
                    ReasonCode.MISSING_REQUIRED_TOPIC,
                )
            )
        if contract.message_encodings:
            out.append(
                _Expect(
                    "allowed_encodings",
                    "streams",
                    "ExpectColumnValuesToBeInSet",
                    {"column": "message_encoding", "value_set": sorted(contract.message_encodings)},
                    ReasonCode.UNSUPPORTED_ENCODING,
                )
            )
    if vendor.calibration.sidecar_path is None and not vendor.calibration.topics:
        out = [e for e in out if e.name != "calibration_valid"]  # the vendor ships no calibration at all
    return out


def check_mcap(
    report: LogReport,
    vendor: VendorConfig,
    *,
    calibration_id: int | None,
    baseline_schemas: Mapping[str, str] | None = None,
) -> list[CheckOutcome]:
    """All pre-gate checks of one robot log."""
    outcomes = _finding_outcomes(
        "mcap", [(f.code, f.detail, None, f.fatal, f.topic) for f in report.findings]
    )
    if not report.ok:
        return outcomes  # nothing else can be trusted after a fatal read
    streams, episode = mcap_tables(report, vendor, calibration_id=calibration_id)
    outcomes += run_suite(mcap_expectations(vendor), {"streams": streams, "episode": episode})
    outcomes += _schema_drift(report, baseline_schemas or {})
    return outcomes


def _schema_drift(report: LogReport, baseline: Mapping[str, str]) -> list[CheckOutcome]:
    drifted = {
        t.topic: {"baseline": baseline[t.topic], "now": t.schema_sha256}
        for t in report.topics
        if t.topic in baseline and t.schema_sha256 and t.schema_sha256 != baseline[t.topic]
    }
    if not drifted:
        return [CheckOutcome("schema_drift", CheckStatus.PASSED, observed={"topics": len(baseline)})]
    return [
        CheckOutcome(
            "schema_drift",
            CheckStatus.WARNED,
            ReasonCode.SCHEMA_DRIFT,
            observed={"drifted": drifted},
            detail="schema changed from the vendor's earlier accepted episodes on "
            + ", ".join(sorted(drifted)),
        )
    ]


# -- videos ------------------------------------------------------------------------------------------------


def video_tables(probe: VideoProbe) -> tuple[pd.DataFrame, pd.DataFrame]:
    import pandas as pd

    streams = pd.DataFrame(
        [
            {
                "codec": probe.codec,
                "width": probe.width,
                "height": probe.height,
                "decoded_frames": probe.decoded_frames,
                "fps": probe.fps_measured or probe.fps_avg,
            }
        ]
        if probe.video_stream_index is not None
        else [],
        columns=["codec", "width", "height", "decoded_frames", "fps"],
    )
    episode = pd.DataFrame([{"duration_s": probe.duration_s}])
    return streams, episode


def video_expectations(vendor: VendorConfig) -> list[_Expect]:
    pre = vendor.quality.pre
    video = vendor.video
    out = [
        _Expect(
            "has_video",
            "streams",
            "ExpectTableRowCountToBeBetween",
            {"min_value": 1},
            ReasonCode.NO_VIDEO_STREAM,
        ),
        _Expect(
            "min_frames",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "decoded_frames", "min_value": pre.min_frames},
            ReasonCode.TOO_FEW_FRAMES,
        ),
        _Expect(
            "duration_bounds",
            "episode",
            "ExpectColumnValuesToBeBetween",
            {"column": "duration_s", "min_value": pre.min_duration_s, "max_value": pre.max_duration_s},
            ReasonCode.DURATION_OUT_OF_BOUNDS,
        ),
    ]
    if video is not None:
        out += [
            _Expect(
                "width_bounds",
                "streams",
                "ExpectColumnValuesToBeBetween",
                {"column": "width", "min_value": video.min_width_px, "max_value": video.max_width_px},
                ReasonCode.RESOLUTION_OUT_OF_BOUNDS,
            ),
            _Expect(
                "height_bounds",
                "streams",
                "ExpectColumnValuesToBeBetween",
                {"column": "height", "min_value": video.min_height_px, "max_value": video.max_height_px},
                ReasonCode.RESOLUTION_OUT_OF_BOUNDS,
            ),
            _Expect(
                "fps_bounds",
                "streams",
                "ExpectColumnValuesToBeBetween",
                {"column": "fps", "min_value": video.min_fps, "max_value": video.max_fps},
                ReasonCode.FRAME_RATE_OUT_OF_BOUNDS,
            ),
        ]
        if video.codecs:
            out.append(
                _Expect(
                    "allowed_codecs",
                    "streams",
                    "ExpectColumnValuesToBeInSet",
                    {"column": "codec", "value_set": sorted(video.codecs)},
                    ReasonCode.UNSUPPORTED_ENCODING,
                )
            )
    return out


def check_video(probe: VideoProbe, vendor: VendorConfig) -> list[CheckOutcome]:
    """All pre-gate checks of one video file."""
    outcomes = _finding_outcomes(
        "video",
        [(f.code, f.detail, f.severity, f.severity is Severity.QUARANTINE, None) for f in probe.findings],
    )
    if any(o.severity is Severity.QUARANTINE for o in outcomes if o.status is CheckStatus.FAILED):
        return outcomes  # an unreadable file: the table checks would only repeat it
    streams, episode = video_tables(probe)
    outcomes += run_suite(video_expectations(vendor), {"streams": streams, "episode": episode})
    return outcomes


# -- shared ------------------------------------------------------------------------------------------------


def _finding_outcomes(
    prefix: str, findings: Sequence[tuple[ReasonCode, str, Severity | None, bool, str | None]]
) -> list[CheckOutcome]:
    """Probe findings as checks; a passed ``<prefix>.structure`` check when there are none."""
    outcomes = []
    for code, detail, severity, fatal, topic in findings:
        if code in GATE_DECIDED:
            continue
        sev = Severity.QUARANTINE if fatal else (severity or REASON_SEVERITY[code])
        outcomes.append(
            CheckOutcome(
                f"{prefix}.{code.value}",
                CheckStatus.FAILED if sev is Severity.QUARANTINE else CheckStatus.WARNED,
                code,
                sev,
                observed={"topic": topic} if topic else {},
                detail=detail,
            )
        )
    if not outcomes:
        outcomes.append(CheckOutcome(f"{prefix}.structure", CheckStatus.PASSED))
    return outcomes


@lru_cache(maxsize=1)
def _gx() -> Any:
    """An in-memory (ephemeral) GX context with one pandas data source per table; built once per process."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX announces its temporary docs folder at INFO on every context; the gate's own results are what matter.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("sluice_pregate")
    return {
        table: source.add_dataframe_asset(table).add_batch_definition_whole_dataframe(f"{table}_all")
        for table in ("streams", "episode")
    }


def run_suite(expectations: Sequence[_Expect], tables: Mapping[str, pd.DataFrame]) -> list[CheckOutcome]:
    """Validate each table against its expectations; one outcome per expectation."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    batch_defs = _gx()
    outcomes = []
    for table, frame in tables.items():
        wanted = [e for e in expectations if e.table == table]
        if not wanted:
            continue
        suite = gx.ExpectationSuite(name=f"pregate_{table}")
        for e in wanted:
            suite.add_expectation(getattr(gxe, e.kind)(**e.kwargs))
        result = batch_defs[table].get_batch(batch_parameters={"dataframe": frame}).validate(suite)
        for e, r in zip(wanted, result.results, strict=True):
            observed = _jsonable(
                {
                    k: r.result.get(k)
                    for k in ("observed_value", "unexpected_count", "partial_unexpected_list")
                    if r.result.get(k) is not None
                }
            )
            if r.success:
                outcomes.append(CheckOutcome(e.name, CheckStatus.PASSED, observed=observed))
                continue
            severity = e.severity or REASON_SEVERITY[e.reason]
            outcomes.append(
                CheckOutcome(
                    e.name,
                    CheckStatus.FAILED if severity is Severity.QUARANTINE else CheckStatus.WARNED,
                    e.reason,
                    severity,
                    observed=observed,
                    detail=_describe(e, observed, frame),
                )
            )
    return outcomes


def _describe(e: _Expect, observed: Mapping[str, Any], frame: pd.DataFrame) -> str:
    bounds = {k: v for k, v in e.kwargs.items() if k != "column"}
    column = e.kwargs.get("column")
    where = ""
    if column and "topic" in frame.columns and observed.get("partial_unexpected_list") is not None:
        bad = frame[frame[column].isin(observed["partial_unexpected_list"])]["topic"].tolist()
        where = f" on {', '.join(map(str, bad[:5]))}" if bad else ""
    seen = observed.get("partial_unexpected_list", observed.get("observed_value"))
    return f"{e.name}: {column or 'rows'} {seen!r}{where} outside {bounds}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value
