"""The quality pre-gate: Great Expectations suites over probe results, plus the vendor contract.

The probes (:mod:`pipeline.mcaplog`, :mod:`pipeline.videoprobe`) measure and report; this package decides.
Each check is one expectation whose failure maps to one :class:`~pipeline.enums.ReasonCode`; structural
findings of the probes (truncation, CRC mismatch, decode errors...) become checks of their own. From the
list of outcomes, :func:`decide` derives the one state the input ends in.

* :mod:`pipeline.quality.suite` – outcomes, the decision, the GX plumbing;
* :mod:`pipeline.quality.robot` – robot logs (robot contract or container-only profile);
* :mod:`pipeline.quality.timing` – clock-jump limits and jump-free gap rates;
* :mod:`pipeline.quality.video` – videos (and the probe limits a vendor's contract implies).
"""

from pipeline.quality.robot import (
    check_mcap,
    episode_ids,
    is_robot_contract,
    mcap_expectations,
    mcap_tables,
    schema_drift,
)
from pipeline.quality.suite import CheckOutcome, Expect, Verdict, decide, failed_outcome, run_suite, warm_up
from pipeline.quality.timing import gap_rate, topic_gap_rates
from pipeline.quality.video import check_video, probe_limits, video_expectations, video_tables

__all__ = [
    "CheckOutcome",
    "Expect",
    "Verdict",
    "check_mcap",
    "check_video",
    "decide",
    "episode_ids",
    "failed_outcome",
    "gap_rate",
    "is_robot_contract",
    "mcap_expectations",
    "mcap_tables",
    "probe_limits",
    "run_suite",
    "schema_drift",
    "topic_gap_rates",
    "video_expectations",
    "video_tables",
    "warm_up",
]
