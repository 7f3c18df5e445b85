"""Recorded command outputs of GPU nodes (``fixtures/``, written by hand in the shape the tools print)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ops_fixtures import recorded

from pipeline.ops import CommandOutput, ContainerRuntime, PreflightInputs


@pytest.fixture
def healthy_inputs() -> Callable[..., PreflightInputs]:
    """Inputs of a healthy H100 node; keyword arguments replace single inputs."""

    def make(**replace: object) -> PreflightInputs:
        base: dict[str, object] = {
            "gpu_query": recorded("h100x8_query_gpu.csv", ("nvidia-smi", "--query-gpu=index,name")),
            "nvidia_smi_q": recorded("h100x8_nvsmi_q_ecc_clean.txt", ("nvidia-smi", "-q")),
            "kernel_log": recorded("dmesg_clean.txt", ("dmesg",)),
            "df": recorded("df_healthy.txt", ("df",)),
            "runtimes": {
                ContainerRuntime.DOCKER: CommandOutput.ok(("docker", "info"), "27.3.1\n"),
                ContainerRuntime.ENROOT: CommandOutput.ok(("enroot", "version"), "3.5.0\n"),
            },
        }
        base.update(replace)
        return PreflightInputs(**base)  # type: ignore[arg-type]

    return make
