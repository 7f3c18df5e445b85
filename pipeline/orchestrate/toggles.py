"""Per-run step toggles: which steps a run executes, validated strictly.

Airflow accepts any keys in a run's conf and silently ignores those it does not know, so a misspelled
``transcod: false`` would run transcode anyway. :func:`validate_conf` refuses unknown keys (suggesting the
closest allowed one) and non-boolean values, and fills every step the conf leaves out from the vendor's
config.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.enums import StepName
from pipeline.errors import ConfigError
from pipeline.orchestrate.names import STEP_ORDER

if TYPE_CHECKING:
    from pipeline.config import VendorConfig

#: The keys a run's conf may hold: one boolean per step.
ALLOWED_CONF_KEYS: tuple[str, ...] = tuple(step.value for step in STEP_ORDER)


def validate_conf(vendor: VendorConfig, conf: Mapping[str, object] | None) -> dict[str, bool]:
    """The run's toggles, one per step in pipeline order: the conf's value, else the vendor's default.

    Raises :class:`~pipeline.errors.ConfigError` listing every unknown key (with the closest allowed key
    when one is near) and every value that is not a boolean, and for a run with every step off: it would
    ingest nothing and still end green (the trigger form, a schedule of a vendor whose file turns every
    step off, and ``sluice run`` alike).
    """
    conf = dict(conf or {})
    problems: list[tuple[str, str]] = []
    allowed = ", ".join(ALLOWED_CONF_KEYS)
    for key in sorted(conf, key=str):
        if key in ALLOWED_CONF_KEYS:
            continue
        near = difflib.get_close_matches(str(key), ALLOWED_CONF_KEYS, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        problems.append((str(key), f"unknown run option {key!r}{hint}; allowed: {allowed}"))
    for key in ALLOWED_CONF_KEYS:
        if key in conf and not isinstance(conf[key], bool):
            problems.append((key, f"{conf[key]!r} is not a boolean; allowed: true, false"))
    if problems:
        raise ConfigError(f"run conf of vendor {vendor.name}", problems)
    toggles = {
        step.value: bool(conf[step.value]) if step.value in conf else vendor.steps[step].enabled
        for step in STEP_ORDER
    }
    if not any(toggles.values()):
        raise ConfigError(
            f"run conf of vendor {vendor.name}",
            [("", f"{NO_STEP}; turn on at least one of: {allowed}")],
        )
    return toggles


#: Why a run with every step off is refused.
NO_STEP = "every step is off, so the run would do nothing"


def toggle_description(vendor: VendorConfig, step: StepName) -> str:
    """What the trigger form says under a step's switch: what switching it off means, and where it runs."""
    config = vendor.steps[step]
    effect = (
        "critical: if it fails, the run fails"
        if config.critical
        else "non-critical: if it fails, the run succeeds with a warning"
    )
    slots = f"{config.pool_slots} slot{'s' if config.pool_slots != 1 else ''}"
    return (
        f"Run {step.value} on every batch of this run ({effect}). Switched off, it is skipped and the next "
        f"steps work on what earlier runs left. Pool {config.pool}, {slots} per batch."
    )
