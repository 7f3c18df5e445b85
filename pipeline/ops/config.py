"""The node-operations config: what a healthy node looks like, and what the sweeps may undo.

One YAML file per node class (``/etc/sluice/ops.yaml``, rendered by the Ansible ``preflight`` role from the
cluster's inventory) holds a ``preflight`` and a ``sweep`` section. It is read with the same strict loader
as vendor files: unknown keys are refused and every problem is reported with its key path.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import ByteSize, Field, ValidationError, field_validator

from pipeline.config.loader import read_config_text
from pipeline.config.messages import validation_problems
from pipeline.config.types import FrozenModel, Lax, PositiveBytes, format_loc
from pipeline.config.yamlsafe import YamlRefused, parse_strict_yaml
from pipeline.errors import ConfigError

_GIB = 2**30


class ContainerRuntime(StrEnum):
    """Container runtimes the preflight knows how to probe (see :data:`pipeline.ops.runners.RUNTIME_PROBES`)."""

    DOCKER = "docker"
    PODMAN = "podman"
    ENROOT = "enroot"
    APPTAINER = "apptainer"
    NVIDIA_CONTAINER_TOOLKIT = "nvidia-container-toolkit"


#: Xid codes NVIDIA attributes to the application rather than the GPU (13 graphics engine exception,
#: 31 memory page fault, 43 GPU stopped processing, 45 preemptive cleanup after another error): a user's
#: crashing kernel must not drain a healthy node. Hardware Xids (48, 63, 64, 74, 79, 92, 94, 95, 119, ...)
#: always fail.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45)

#: Drain reasons Slurm itself writes for faults that often clear on their own: a node that stopped
#: answering, a job whose processes would not die, a failed prolog or epilog, an unplanned reboot.
DEFAULT_TRANSIENT_REASONS = (
    r"Not responding",
    r"Kill task failed",
    r"Prolog error",
    r"Epilog error",
    r"Node unexpectedly rebooted",
    r"batch job complete failure",
)


class PreflightConfig(FrozenModel):
    """What a healthy node of this class has."""

    expected_gpu_count: int = Field(default=0, ge=0, le=64, description="GPUs the node must show.")
    expected_gpu_model: str | None = Field(
        default=None,
        min_length=1,
        description="Text every GPU's product name must contain, e.g. 'H100' (case-insensitive).",
    )
    # Corrected errors are corrected, but a GPU that logs them since boot is the quiet failure the issue
    # names: zero by default; a site that tolerates a trickle raises it.
    max_volatile_corrected_ecc: int = Field(
        default=0, ge=0, description="Corrected ECC errors since boot tolerated per GPU."
    )
    max_volatile_uncorrected_ecc: int = Field(
        default=0, ge=0, description="Uncorrected ECC errors since boot tolerated per GPU."
    )
    require_ecc_enabled: bool = Field(
        default=True, description="Fail a GPU whose ECC mode is not Enabled (datacenter GPUs)."
    )
    ignored_xids: Annotated[tuple[int, ...], Lax] = Field(
        default=DEFAULT_IGNORED_XIDS, description="Xid codes that are the application's, not the GPU's."
    )
    # 10 GiB on the root file system leaves room for logs, container layers and a job's temporary files.
    min_free_bytes: dict[str, PositiveBytes] = Field(
        default_factory=lambda: {"/": ByteSize(10 * _GIB)},
        description="Free space each path's file system must keep, e.g. {'/scratch': '500 GiB'}.",
    )
    container_runtimes: Annotated[tuple[Annotated[ContainerRuntime, Lax], ...], Lax] = Field(
        default=(), description="Runtimes that must answer (docker's daemon, enroot, ...)."
    )
    # nvidia-smi on an 8-GPU node with a hung GPU can take tens of seconds; Slurm's own health-check
    # timeout is 60 s, so every command is cut at 20 s.
    command_timeout_s: float = Field(default=20.0, gt=0, le=300, description="Timeout of each command.")

    @field_validator("min_free_bytes")
    @classmethod
    def _absolute_paths(cls, value: dict[str, ByteSize]) -> dict[str, ByteSize]:
        relative = sorted(path for path in value if not path.startswith("/"))
        if relative:
            raise ValueError(f"paths must be absolute; got {', '.join(map(repr, relative))}")
        return value


class SweepPolicy(FrozenModel):
    """What the sweeps may undo, and whose work they leave alone."""

    transient_reasons: Annotated[tuple[str, ...], Lax] = Field(
        default=DEFAULT_TRANSIENT_REASONS,
        description="Regular expressions matched at the start of a drain reason (case-insensitive).",
    )
    resume_setters: Annotated[tuple[str, ...], Lax] = Field(
        default=("root", "slurm"),
        description="Users whose drains may be resumed; a drain set by a person is never undone.",
    )
    reservation_owners: Annotated[tuple[str, ...], Lax] = Field(
        default=("root", "slurm"), description="Accounts of the controller and its automation."
    )
    reservation_prefixes: Annotated[tuple[str, ...], Lax] = Field(
        default=("sluice_",),
        description="Name prefixes of reservations the automation creates (and so may release).",
    )

    @field_validator("transient_reasons")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns


class OpsConfig(FrozenModel):
    """The whole file: ``preflight`` and ``sweep`` sections (both optional, defaults as documented)."""

    preflight: PreflightConfig = Field(default_factory=PreflightConfig)
    sweep: SweepPolicy = Field(default_factory=SweepPolicy)


def load_ops_config(path: Path) -> OpsConfig:
    """Read and validate an ops file; raises :class:`ConfigError` listing every problem with its key path."""
    source = str(path)
    text = read_config_text(path)
    try:
        tree = parse_strict_yaml(text)
    except YamlRefused as exc:
        raise ConfigError(source, [(format_loc(exc.loc), str(exc))]) from None
    data = {} if tree.data is None else tree.data
    if not isinstance(data, dict):
        raise ConfigError(source, [("", "the document must be a mapping with preflight and sweep keys")])
    problems = list(tree.problems)
    try:
        config = OpsConfig.model_validate(data)
    except ValidationError as exc:
        flagged = [loc for loc, _ in tree.problems]
        problems += [
            (loc, message)
            for loc, message in validation_problems(exc, OpsConfig, tree)
            if not any(loc[: len(bad)] == bad for bad in flagged)
        ]
    if problems:
        raise ConfigError(source, [(format_loc(loc), message) for loc, message in problems])
    return config
