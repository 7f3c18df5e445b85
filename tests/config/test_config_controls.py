"""The ``controls`` declared on config fields cover every pre-gate check a setting feeds, found by perturbation.

Each leaf setting of the example vendors is changed to another valid value; every pre-gate expectation whose
arguments change, and every video-probe limit that changes, names a check the setting must declare. A new
expectation that reads a threshold, or a threshold wired into the probe, without a declaration fails here.
(Settings a check reads only while measuring, such as ``timestamps.max_clock_jump_s`` through the jump
limits, are caught by the crossing tests in ``tests/quality/test_quality_controls.py`` instead.)
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipeline.config import VendorConfig, load_vendor
from pipeline.config.controls import Control
from pipeline.docsgen import config_controls
from pipeline.enums import Gate, ReasonCode
from pipeline.quality.pregate import mcap_expectations, probe_limits, video_expectations

VENDORS = Path(__file__).resolve().parents[2] / "dags" / "vendors"
#: The sections the pre-gate reads (``STEP_READS[quality_pre]`` plus the ingest limits the probes get).
SECTIONS = ("topics", "video", "timestamps", "calibration", "ingest", "quality")
#: The finding each video-probe limit decides (``pipeline.videoprobe.findings``), named as ``check_video``
#: stores it: ``video.<code>``.
LIMIT_FINDINGS: dict[str, tuple[ReasonCode, ...]] = {
    "allowed_containers": (ReasonCode.DISALLOWED_CONTAINER,),
    "max_pixels": (ReasonCode.RESOLUTION_OUT_OF_BOUNDS,),
    "max_width_px": (ReasonCode.RESOLUTION_OUT_OF_BOUNDS,),
    "max_height_px": (ReasonCode.RESOLUTION_OUT_OF_BOUNDS,),
    "allowed_codecs": (ReasonCode.UNSUPPORTED_ENCODING,),
    "memory_limit_bytes": (ReasonCode.PROBE_RESOURCE_LIMIT,),
    "timeout_s": (ReasonCode.PROBE_TIMEOUT,),
    "letterbox_min_fraction": (ReasonCode.LETTERBOXED,),
    "min_frames": (ReasonCode.TOO_FEW_FRAMES,),
    "blank_ratio_max": (ReasonCode.BLANK_VIDEO,),
    "blank_luma_std_max": (ReasonCode.BLANK_VIDEO,),
    "vfr_tolerance": (ReasonCode.VARIABLE_FRAME_RATE,),
}


def _leaves(data: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every scalar or list-of-scalars setting, with list items of models addressed by index."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list) and data and isinstance(data[0], dict):
        for index, item in enumerate(data):
            yield from _leaves(item, (*path, index))
    else:
        yield path, data


def _candidates(value: Any) -> list[Any]:
    """Other values worth trying for a setting (the first one that validates is used)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, value * 2]
    if isinstance(value, float):
        return [value * 0.5, value * 2, 1.0] if value else [0.5, 1.0]
    if isinstance(value, list):
        return [value[1:], [*value, "x"]] if len(value) > 1 else [[], ["calibration/other"]]
    if value is None:
        return ["calibration.json"]  # the one optional scalar the pre-gate reads: calibration.sidecar_path
    return []


def _set(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _fingerprint(vendor: VendorConfig) -> tuple[dict[str, str], dict[str, Any]]:
    """Each pre-gate expectation as text (kind, arguments, reason), and the probe limits."""
    expectations = mcap_expectations(vendor) if vendor.kind == "mcap" else video_expectations(vendor)
    by_name = {e.name: f"{e.kind} {sorted(e.kwargs.items())!r} {e.reason}" for e in expectations}
    limits = probe_limits(vendor).model_dump() if vendor.kind == "video" else {}
    return by_name, limits


def _key(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path if not isinstance(p, int))


def derived_controls(vendor: VendorConfig) -> set[tuple[str, Gate, str]]:
    """``(key, gate, check)`` for every setting whose change changes a pre-gate check of ``vendor``."""
    data = vendor.model_dump(mode="json")
    base = _fingerprint(vendor)
    found: set[tuple[str, Gate, str]] = set()
    for path, value in _leaves({k: data[k] for k in SECTIONS if data.get(k) is not None}):
        for candidate in _candidates(value):
            try:
                changed = VendorConfig.model_validate(_set(data, path, candidate))
            except ValidationError:
                continue
            expectations, limits = _fingerprint(changed)
            names = set(expectations) | set(base[0])
            found |= {(_key(path), Gate.PRE, n) for n in names if expectations.get(n) != base[0].get(n)}
            for field in set(limits) | set(base[1]):
                if limits.get(field) != base[1].get(field):
                    assert field in LIMIT_FINDINGS, (
                        f"probe limit {field} is new: which finding does it decide?"
                    )
                    found |= {(_key(path), Gate.PRE, f"video.{code.value}") for code in LIMIT_FINDINGS[field]}
            break
    return found


def _declared() -> set[tuple[str, Gate, str]]:
    return {(key, c.gate, c.check) for key, entries in config_controls().items() for c in entries}


@pytest.mark.parametrize("vendor_file", ["acme_robotics.yaml", "northwind_video.yaml"])
def test_every_setting_a_pregate_check_reads_declares_it(vendor_file: str) -> None:
    derived = derived_controls(load_vendor(VENDORS / vendor_file))
    assert derived, "the perturbation found no setting at all: the walk is broken"
    missing = sorted(derived - _declared())
    assert missing == [], f"settings that tune a check without declaring it in controls: {missing}"


def test_the_perturbation_finds_the_settings_the_expectations_read() -> None:
    """The detector itself works: known links are found, in both gates' vocabularies."""
    robot = derived_controls(load_vendor(VENDORS / "acme_robotics.yaml"))
    video = derived_controls(load_vendor(VENDORS / "northwind_video.yaml"))
    assert ("quality.pre.max_gap_rate", Gate.PRE, "max_gap_rate") in robot
    assert ("timestamps.max_skew_s", Gate.PRE, "max_clock_skew") in robot
    assert ("topics.state.required", Gate.PRE, "required_topics") in robot
    assert ("video.min_width_px", Gate.PRE, "width_bounds") in video
    assert ("video.max_width_px", Gate.PRE, "video.resolution_out_of_bounds") in video
    assert ("ingest.probe_timeout_s", Gate.PRE, "video.probe_timeout") in video


def test_declared_checks_name_real_reasons_and_gates() -> None:
    controls = config_controls()
    assert controls["quality.pre.max_gap_rate"] == (
        Control(Gate.PRE, "max_gap_rate", ReasonCode.GAP_RATE_HIGH),
    )
    for key, entries in controls.items():
        for entry in entries:
            prefix = entry.check.split(".")[0]
            if "." in entry.check:  # a probe finding is stored as <probe>.<code>
                assert prefix in {"mcap", "video"} and entry.check == f"{prefix}.{entry.reason.value}", key
