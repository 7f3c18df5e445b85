"""The Ray workers see the driver's storage settings, even those exported after the cluster started.

A head node is started (``ray start``, by the project's own code) from an environment without the
variable; the test then sets it in this process only, connects with :func:`pipeline.raycluster.ensure_ray`
and asks a Ray task what it sees. A Ray this process started itself would inherit its environment and
could not tell the difference.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import opt_in

from pipeline.raycluster import ensure_ray
from pipeline.services.raynodes import RayCluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    # a `ray start` node: opt-in like the other cluster modules (a minute or more on a loaded 2-core machine)
    opt_in("starts a Ray head node"),
]

#: A storage setting the head never had: the value a worker reports can only come from this driver.
SECRET = "AKIA-driver-only-value"


@pytest.fixture
def head(monkeypatch: pytest.MonkeyPatch) -> Iterator[RayCluster]:
    import ray

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)  # the node starts without it
    # Ray 2.60's `ray start` turns token authentication on when ~/.ray/auth_token exists (any local
    # `ray.init()` on this machine writes it), and a driver connecting by address then sends none.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    root = Path(tempfile.mkdtemp(prefix="sluice-ray-", dir="/tmp"))  # short: Ray's socket paths live here
    cluster = RayCluster(root, head_cpus=1)
    try:
        cluster.up()
        yield cluster
    finally:
        ray.shutdown()
        cluster.down()


def test_workers_see_the_storage_settings_the_driver_has(
    head: RayCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ray

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", SECRET)
    monkeypatch.setenv("SLUICE_NOT_FOR_WORKERS", "1")
    with caplog.at_level(logging.INFO, logger="pipeline.raycluster"):
        ensure_ray(head.address)

    @ray.remote(num_cpus=0)
    def seen(name: str) -> str | None:
        return os.environ.get(name)

    assert ray.get(seen.remote("AWS_ACCESS_KEY_ID"), timeout=120) == SECRET
    # Only the storage settings travel: the head's environment is otherwise the workers'.
    assert ray.get(seen.remote("SLUICE_NOT_FOR_WORKERS"), timeout=120) is None
    assert "AWS_ACCESS_KEY_ID" in caplog.text and SECRET not in caplog.text, caplog.text
