"""Recorded command outputs of GPU nodes and the node class they belong to (shared by the ops tests)."""

from __future__ import annotations

from pathlib import Path

from pipeline.ops import CommandOutput, PreflightConfig

FIXTURES = Path(__file__).parent / "fixtures"

#: The node class of the fixtures: an HGX H100 with 8 GPUs, 500 GiB of scratch kept free, Docker and enroot.
H100_NODE = PreflightConfig.model_validate(
    {
        "expected_gpu_count": 8,
        "expected_gpu_model": "H100",
        "min_free_bytes": {"/": "50 GiB", "/scratch": "500 GiB"},
        "container_runtimes": ["docker", "enroot"],
    }
)


def recorded(name: str, argv: tuple[str, ...] = ("recorded",)) -> CommandOutput:
    """A fixture file as the successful output of ``argv``."""
    return CommandOutput.ok(argv, (FIXTURES / name).read_text())
