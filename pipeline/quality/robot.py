"""Pre-gate checks of a robot log: the reader's structural findings, then suites over its per-topic stats.

Two profiles come out of one vendor config:

* a **robot contract** lists topics (cameras, state, actions). The log must have messages, the required
  topics, the episode metadata (robot, session), a calibration and a sane duration, and its topics must
  meet their rates, encodings and schemas. Near-duplicate detection also belongs here (see
  :mod:`pipeline.steps.quality_pre`).
* a **container-only** contract (``topics: {}``, what :func:`pipeline.config.generic_vendor` makes) lists
  none: only structure (truncation, CRCs, compressions), encodings against the allow-lists, the MCAP
  registry's encoding pairs and timestamp order are judged. A valid file with no messages is accepted.

Timing is judged here, from the reader's raw numbers and the vendor's thresholds, never from the reader's
own defaults: a clock jump is reported once, as ``clock_jump``, and the jump is taken out of the span that
gap rates are measured over, so that an hour-long hole in the timeline does not also read as missing
messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.enums import CheckStatus, ReasonCode, Severity
from pipeline.quality.suite import (
    CheckOutcome,
    Expect,
    duration_bounds,
    failed_outcome,
    finding_outcomes,
    run_suite,
)
from pipeline.quality.timing import (
    CLOCK_JUMP_MIN_PERIODS,
    jump_limits_ns,
    timeline_jump_excess_ns,
    topic_gap_rates,
)

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.config import VendorConfig
    from pipeline.mcaplog import LogReport, TopicStats

#: Codes the gate decides itself from the vendor's thresholds; the reader's opinion on them is ignored.
GATE_DECIDED = frozenset(
    {
        ReasonCode.NON_MONOTONIC_TIME,
        ReasonCode.DUPLICATE_TIMESTAMPS,
        ReasonCode.CLOCK_JUMP,
        ReasonCode.CLOCK_SKEW,
        ReasonCode.GAP_RATE_HIGH,
        ReasonCode.NO_MESSAGES,
        ReasonCode.TOO_FEW_FRAMES,
        ReasonCode.UNSUPPORTED_ENCODING,
    }
)

#: The message encoding each well-known schema encoding implies (the MCAP well-known registry). A channel
#: pairing a registry schema encoding with another message encoding cannot be decoded by anything, whatever
#: the vendor allows (rosbag2's ``wrong_rmw`` test bag: ``ros2msg`` schemas, ``wrong_format`` messages).
REGISTRY_MESSAGE_ENCODING: dict[str, str] = {
    "protobuf": "protobuf",
    "flatbuffer": "flatbuffer",
    "ros1msg": "ros1",
    "ros2msg": "cdr",
    "ros2idl": "cdr",
    "omgidl": "cdr",
    "jsonschema": "json",
}

STREAM_COLUMNS = (
    "topic",
    "message_encoding",
    "schema_encoding",
    "message_count",
    "camera_frames",
    "gap_rate",
    "backward_steps",
    "duplicate_log_times",
    "largest_jump_ns",
    "jump_limit_ns",
    "abs_skew_max_ns",
    "contract_problem",
    "registry_problem",
)


def is_robot_contract(vendor: VendorConfig) -> bool:
    """True when the vendor's contract lists topics; False for a container-only profile."""
    return vendor.topics is not None and bool(vendor.topics.all_topics())


def check_mcap(
    report: LogReport,
    vendor: VendorConfig,
    *,
    calibration_id: int | None,
    baseline_schemas: Mapping[str, str] | None = None,
    relative_path: str | None = None,
) -> list[CheckOutcome]:
    """All pre-gate checks of one robot log (the near-duplicate check needs the catalog: see the step);
    ``relative_path`` is the file's path in the vendor root, where ``episode_metadata`` may find its ids."""
    outcomes = finding_outcomes(
        "mcap",
        [(f.code, f.detail, None, f.fatal, f.topic) for f in report.findings],
        gate_decided=GATE_DECIDED,
    )
    if not report.ok:
        return outcomes  # nothing else can be trusted after a fatal read
    streams, episode = mcap_tables(report, vendor, calibration_id=calibration_id, relative_path=relative_path)
    outcomes += run_suite(mcap_expectations(vendor), {"streams": streams, "episode": episode})
    outcomes += content_checks(report, vendor)
    outcomes += schema_drift(report, baseline_schemas or {})
    return outcomes


# -- tables ------------------------------------------------------------------------------------------------


def episode_ids(report: LogReport, vendor: VendorConfig, relative_path: str | None) -> dict[str, str]:
    """The episode's ids (robot_id, session_id, episode_id, task): its ``episode`` metadata record's, with
    what the record lacks from the path and the fixed values of the vendor's ``episode_metadata``."""
    meta = report.metadata_record("episode")
    record = dict(meta.values) if meta is not None else {}
    return vendor.episode_metadata.resolve(record, relative_path)


def mcap_tables(
    report: LogReport, vendor: VendorConfig, *, calibration_id: int | None, relative_path: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``streams`` (one row per topic) and ``episode`` (one row) tables the suites validate."""
    import pandas as pd

    contract = vendor.topics
    specs = {spec.topic: spec for spec in contract.all_topics()} if contract else {}
    cameras = {c.topic for c in contract.cameras} if contract else set()
    limits = jump_limits_ns(report, vendor)
    excess_ns = timeline_jump_excess_ns(report.topics, limits, set(specs))
    gaps = topic_gap_rates(report, vendor)
    rows = []
    for t in report.topics:
        skew = [abs(x) for x in (t.skew_min_ns, t.skew_max_ns) if x is not None]
        rows.append(
            {
                "topic": t.topic,
                "message_encoding": t.message_encoding,
                "schema_encoding": t.schema_encoding or "none",
                "message_count": t.message_count,
                "camera_frames": t.message_count if t.topic in cameras else None,
                "gap_rate": gaps.get(t.topic),
                "backward_steps": t.backward_steps,
                "duplicate_log_times": t.duplicate_log_times,
                "largest_jump_ns": t.largest_jump_ns,
                "jump_limit_ns": limits[t.topic],
                "abs_skew_max_ns": max(skew) if skew else None,
                "contract_problem": _contract_problem(t, specs.get(t.topic)),
                "registry_problem": _registry_problem(t),
            }
        )
    streams = pd.DataFrame(rows, columns=list(STREAM_COLUMNS))
    values = episode_ids(report, vendor, relative_path)
    duration_s = (  # like the gap rates, without the clock jump: that is reported once, as clock_jump
        (report.end_ns - report.start_ns - excess_ns) / 1e9
        if report.start_ns is not None and report.end_ns is not None
        else None
    )
    episode = pd.DataFrame(
        [
            {
                "message_count": report.message_count,
                "robot_id": values.get("robot_id") or None,
                "session_id": values.get("session_id") or None,
                "duration_s": duration_s,
                "calibration_id": calibration_id,
            }
        ]
    )
    return streams, episode


def _missing_id(key: str, vendor: VendorConfig) -> str:
    where = "the log's 'episode' metadata record"
    if vendor.episode_metadata.path_pattern is not None:
        where += " or its path (episode_metadata.path_pattern)"
    else:
        where += " (rosbag2 writes none: episode_metadata.path_pattern can take it from the path)"
    return f"no {key} in {where}"


def _contract_problem(topic: TopicStats, spec: Any) -> str | None:
    """What breaks the topic's own contract entry (its encodings and schema names), if anything."""
    if spec is None:
        return None
    if topic.message_encoding not in spec.message_encodings:
        return f"message encoding {topic.message_encoding!r}, allowed {list(spec.message_encodings)}"
    if spec.schema_names and topic.schema_name not in spec.schema_names:
        return f"schema {topic.schema_name!r}, allowed {list(spec.schema_names)}"
    return None


def _registry_problem(topic: TopicStats) -> str | None:
    implied = REGISTRY_MESSAGE_ENCODING.get(topic.schema_encoding or "")
    if implied is not None and topic.message_encoding != implied:
        return (
            f"{topic.schema_encoding} schema with message encoding {topic.message_encoding!r} "
            f"(the MCAP registry pairs it with {implied!r})"
        )
    return None


# -- expectations ------------------------------------------------------------------------------------------


def _rows(
    frame: pd.DataFrame,
    labels: Sequence[str],
    column: str,
    unit: str = "",
    shown: Callable[[Any], str] | None = None,
) -> str:
    values = frame.set_index("topic")[column].to_dict() if "topic" in frame.columns else {}
    show = shown or (lambda value: f"{value}{unit}")
    return ", ".join(f"{label} {show(values.get(label))}" for label in labels[:5]) + (
        f" (+{len(labels) - 5} more)" if len(labels) > 5 else ""
    )


def _duration_text(ns: Any) -> str:
    """A time span in nanoseconds as a person reads it: ``3,600.033 s``, ``25.0 ms``, ``480 µs``."""
    if ns is None or ns != ns:  # no value for this topic (NaN from the frame)
        return "?"
    size = abs(float(ns))
    # each unit from where the one below would round up to 1000 of itself
    if size >= 999_950_000:
        return f"{float(ns) / 1e9:,.3f} s"
    if size >= 999_500:
        return f"{float(ns) / 1e6:.1f} ms"
    return f"{float(ns) / 1e3:.0f} µs"


def _no_problem(name: str, column: str, reason: ReasonCode) -> Expect:
    """No topic has a problem in ``column`` (a description or null); the detail quotes the problems."""
    return Expect(
        name,
        "streams",
        "ExpectColumnValuesToBeNull",
        {"column": column},
        reason,
        explain=lambda f, labels: "; ".join(
            f"{label}: {f.set_index('topic').at[label, column]}" for label in labels[:5]
        ),
    )


def _encoding_allowed(name: str, column: str, allowed: Iterable[str]) -> Expect:
    """Every topic's encoding in ``column`` is one of ``allowed``."""
    value_set = sorted(allowed)
    what = column.replace("_", " ")  # "message encoding", "schema encoding"
    return Expect(
        name,
        "streams",
        "ExpectColumnValuesToBeInSet",
        {"column": column, "value_set": value_set},
        ReasonCode.UNSUPPORTED_ENCODING,
        explain=lambda f, labels: f"{what} of {_rows(f, labels, column)}; allowed {value_set}",
    )


def mcap_expectations(vendor: VendorConfig) -> list[Expect]:
    """The suites for this vendor, built from its thresholds and contract."""
    pre = vendor.quality.pre
    ts = vendor.timestamps
    contract = vendor.topics
    robot = is_robot_contract(vendor)
    R = ReasonCode
    out = [
        _no_problem("registry_encodings", "registry_problem", R.UNSUPPORTED_ENCODING),
        Expect(
            "max_backward_steps",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "backward_steps", "max_value": ts.max_backward_steps},
            R.NON_MONOTONIC_TIME,
            explain=lambda f, labels: (
                f"log time steps backwards on {_rows(f, labels, 'backward_steps', 'x')}"
                f" (allowed {ts.max_backward_steps} per topic)"
            ),
        ),
        Expect(
            "max_duplicate_timestamps",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "duplicate_log_times", "max_value": ts.max_duplicate_timestamps},
            R.DUPLICATE_TIMESTAMPS,
            explain=lambda f, labels: (
                f"repeated log times on {_rows(f, labels, 'duplicate_log_times', 'x')}"
                f" (allowed {ts.max_duplicate_timestamps} per topic)"
            ),
        ),
        Expect(
            "max_clock_jump",
            "streams",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "jump_limit_ns", "column_B": "largest_jump_ns", "or_equal": True},
            R.CLOCK_JUMP,
            explain=lambda f, labels: (
                f"log time jumps on {_rows(f, labels, 'largest_jump_ns', shown=_duration_text)} "
                f"(limit {ts.max_clock_jump_s:g} s, or {CLOCK_JUMP_MIN_PERIODS:g} periods of a slow topic)"
            ),
        ),
        Expect(
            "max_clock_skew",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "abs_skew_max_ns", "max_value": int(ts.max_skew_s * 1e9)},
            R.CLOCK_SKEW,
            explain=lambda f, labels: (
                f"log time vs hardware stamp off by "
                f"{_rows(f, labels, 'abs_skew_max_ns', shown=_duration_text)} (limit {ts.max_skew_s:g} s)"
            ),
        ),
    ]
    if contract is not None and contract.message_encodings is not None:
        out.append(
            _encoding_allowed("allowed_message_encodings", "message_encoding", contract.message_encodings)
        )
    if contract is not None and contract.schema_encodings is not None:
        out.append(
            _encoding_allowed("allowed_schema_encodings", "schema_encoding", contract.schema_encodings)
        )
    if not robot:
        return out
    assert contract is not None
    out += [
        Expect(
            "has_messages",
            "episode",
            "ExpectColumnValuesToBeBetween",
            {"column": "message_count", "min_value": 1},
            R.NO_MESSAGES,
            explain=lambda f, labels: "the log holds no messages",
        ),
        _no_problem("topic_contract", "contract_problem", R.UNSUPPORTED_ENCODING),
        Expect(
            "max_gap_rate",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "gap_rate", "max_value": pre.max_gap_rate},
            R.GAP_RATE_HIGH,
            explain=lambda f, labels: (
                "missing messages at the contract rate: "
                + ", ".join(
                    f"{label} {f.set_index('topic').at[label, 'gap_rate']:.1%}" for label in labels[:5]
                )
                + f" (limit {pre.max_gap_rate:.1%})"
            ),
        ),
        Expect(
            "min_camera_frames",
            "streams",
            "ExpectColumnValuesToBeBetween",
            {"column": "camera_frames", "min_value": pre.min_frames},
            R.TOO_FEW_FRAMES,
            explain=lambda f, labels: (
                f"camera frames {_rows(f, labels, 'camera_frames')} (at least {pre.min_frames})"
            ),
        ),
        Expect(
            "robot_id_present",
            "episode",
            "ExpectColumnValuesToNotBeNull",
            {"column": "robot_id"},
            R.MISSING_METADATA,
            explain=lambda f, labels: _missing_id("robot_id", vendor),
        ),
        Expect(
            "session_id_present",
            "episode",
            "ExpectColumnValuesToNotBeNull",
            {"column": "session_id"},
            R.MISSING_METADATA,
            explain=lambda f, labels: _missing_id("session_id", vendor),
        ),
        duration_bounds(pre),
    ]
    required = sorted(spec.topic for spec in contract.all_topics() if spec.required)
    if required:
        out.append(
            Expect(
                "required_topics",
                "streams",
                "ExpectColumnDistinctValuesToContainSet",
                {"column": "topic", "value_set": required},
                R.MISSING_REQUIRED_TOPIC,
                explain=lambda f, labels: (
                    "missing required topic(s) " + ", ".join(sorted(set(required) - set(f["topic"])))
                ),
            )
        )
    if vendor.calibration.enabled:
        out.append(
            Expect(
                "calibration_valid",
                "episode",
                "ExpectColumnValuesToNotBeNull",
                {"column": "calibration_id"},
                R.NO_CALIBRATION,
                explain=lambda f, labels: "no calibration of this robot is valid at the episode's start",
            )
        )
    return out


# -- content (what the pre-gate's content probes saw inside the messages) --------------------------------------

#: The content checks, in the order they are recorded: camera pictures that do not decode (or do not fill
#: their declared layout), formats or pixel encodings the contract does not allow, pictures of another
#: size than the contract's or than the stream's first, named-vector streams whose names change.
CONTENT_CHECKS = (
    ("camera_decode", ReasonCode.DECODE_ERROR),
    ("camera_format", ReasonCode.UNSUPPORTED_ENCODING),
    ("camera_size", ReasonCode.RESOLUTION_OUT_OF_BOUNDS),
    ("series_content", ReasonCode.SCHEMA_DRIFT),
)


def _problem_text(topic: str, count: int, problem: Any) -> str:
    where = [f"log time {problem.log_time_ns}"] if problem.log_time_ns is not None else []
    if problem.offset is not None:
        where.append(f"byte {problem.offset} of the payload")
    more = f" (+{count - 1} more)" if count > 1 else ""
    return f"{problem.detail}" + (f" ({', '.join(where)})" if where else "") + more


def content_checks(report: LogReport, vendor: VendorConfig) -> list[CheckOutcome]:
    """The content checks of a robot contract's cameras and series (see :data:`CONTENT_CHECKS`).

    A series whose names change mid-episode quarantines (``schema_drift`` at quarantine severity): its
    vectors change meaning halfway, which no resampling can mend. A schema that differs from earlier
    episodes (:func:`schema_drift`) only flags.
    """
    from pipeline.families import FrameKind, camera_family

    contract = vendor.topics
    if contract is None or not is_robot_contract(vendor):
        return []
    found: dict[str, list[str]] = {name: [] for name, _ in CONTENT_CHECKS}
    observed: dict[str, dict[str, Any]] = {name: {} for name, _ in CONTENT_CHECKS}
    bucket = {reason: name for name, reason in CONTENT_CHECKS}
    for camera in contract.cameras:
        stats = report.topic(camera.topic)
        if stats is None or stats.content is None:
            continue
        content = stats.content
        family = camera_family(stats.schema_name)
        observed["camera_decode"][camera.topic] = {"frames": content.messages, "decoded": content.decoded}
        observed["camera_format"][camera.topic] = {"family": content.family, "formats": list(content.formats)}
        observed["camera_size"][camera.topic] = {"sizes": list(content.sizes)}
        if family is None:
            found["camera_format"].append(
                f"{camera.topic}: schema {stats.schema_name!r} is not a camera type Sluice decodes"
            )
            continue
        by_code: dict[ReasonCode, list[Any]] = {}
        for problem in content.problems:
            by_code.setdefault(problem.code, []).append(problem)
        for code, problems in by_code.items():
            share = content.problem_count if len(by_code) == 1 else len(problems)
            found[bucket.get(code, "camera_decode")].append(_problem_text(camera.topic, share, problems[0]))
        raw = family.kind is FrameKind.RAW
        allowed = camera.pixel_encodings if raw else camera.formats
        if allowed:
            extra = [f for f in content.formats if f not in allowed]
            if extra:
                what = "pixel encoding" if raw else "format"
                found["camera_format"].append(
                    f"{camera.topic}: {what} {', '.join(extra)}; the contract allows {', '.join(allowed)}"
                )
        if len(content.sizes) > 1:
            found["camera_size"].append(
                f"{camera.topic}: pictures change size mid-stream ({' then '.join(content.sizes[:3])})"
            )
        want = (camera.width_px, camera.height_px)
        if content.width_px is not None and any(w is not None for w in want):
            got = (content.width_px, content.height_px)
            if any(w is not None and w != g for w, g in zip(want, got, strict=True)):
                found["camera_size"].append(
                    f"{camera.topic}: pictures are {got[0]}x{got[1]}, the contract says "
                    f"{want[0] or 'any'}x{want[1] or 'any'}"
                )
    for spec in (*contract.state, *contract.actions):
        stats = report.topic(spec.topic)
        if stats is None or stats.content is None:
            continue
        content = stats.content
        observed["series_content"][spec.topic] = {"family": content.family, "names": list(content.names)}
        for problem in content.problems[:1]:
            found["series_content"].append(_problem_text(spec.topic, content.problem_count, problem))
    out = []
    for name, reason in CONTENT_CHECKS:
        if found[name]:
            severity = Severity.QUARANTINE if name == "series_content" else None
            out.append(
                failed_outcome(
                    name, reason, "; ".join(found[name]), severity=severity, observed=observed[name]
                )
            )
        else:
            out.append(CheckOutcome(name, CheckStatus.PASSED, observed=observed[name]))
    return out


def schema_drift(report: LogReport, baseline: Mapping[str, str]) -> list[CheckOutcome]:
    """Topics whose schema differs from the vendor's earlier accepted episodes (a flag, not a quarantine)."""
    drifted = {
        t.topic: {"baseline": baseline[t.topic], "now": t.schema_sha256}
        for t in report.topics
        if t.topic in baseline and t.schema_sha256 and t.schema_sha256 != baseline[t.topic]
    }
    if not drifted:
        return [CheckOutcome("schema_drift", CheckStatus.PASSED, observed={"topics": len(baseline)})]
    return [
        failed_outcome(
            "schema_drift",
            ReasonCode.SCHEMA_DRIFT,
            "schema changed from the vendor's earlier accepted episodes on " + ", ".join(sorted(drifted)),
            observed={"drifted": drifted},
        )
    ]
