"""The Ray path's failures a user meets, against a real Ray: an address no head answers is named within
seconds (``ray.init`` alone waits 10+ minutes), and a worker whose setup raises fails its items once, with
the cause in one line, instead of being retried as if its node had died."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.config import load_vendor
from pipeline.enums import StepName, StepStatus
from pipeline.raycluster import GCS_CONNECT_TIMEOUT_S, RayUnreachableError, ensure_ray
from pipeline.settings import load_settings
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.registry import step_class
from pipeline.steps.runner import _run_ray, creation_cause

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_address_no_head_answers_is_named_within_seconds() -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(RayUnreachableError) as raised:
        ensure_ray(address)
    assert time.monotonic() - started < GCS_CONNECT_TIMEOUT_S + 2
    message = str(raised.value)
    assert f"no Ray head answers at SLUICE_RAY_ADDRESS={address}" in message, message
    assert "`sluice services up ray`" in message and "unset SLUICE_RAY_ADDRESS" in message, message


def test_the_cause_of_a_creation_error_is_its_last_exception_line() -> None:
    traceback = (
        "The actor died because of an error raised in its creation task, "
        "ray::_RayWorker.__init__() (pid=1, ip=127.0.0.1)\n"
        '  File "runner.py", line 1, in __init__\n'
        "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
        '  File "store.py", line 2, in setup\n'
        "botocore.exceptions.NoCredentialsError: Unable to locate credentials\n"
    )
    assert creation_cause(RuntimeError(traceback)) == "NoCredentialsError: Unable to locate credentials"
    assert creation_cause(RuntimeError("ray::f()\nKeyError")) == "KeyError"
    assert creation_cause(RuntimeError("something odd\nlast words\n")) == "last words"


@pytest.fixture
def local_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Ray of this process's own (no ``ray start``: a few seconds), gone after the test.

    Without token authentication: Ray 2.60's ``ray.init()`` would otherwise write ``~/.ray/auth_token``,
    and every ``ray start`` on this machine after it (``sluice services up ray``, the cluster tests) would
    demand that token of drivers connecting by address, which ``ray.init`` does not send.
    """
    import ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.ray
def test_a_worker_whose_setup_raises_fails_its_items_once_in_one_line(
    local_ray: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # No catalog configured and none set up under home: building the worker's clients raises
    # RoleSetupError, as a worker missing its storage credentials raises NoCredentialsError.
    settings = load_settings(home=tmp_path / "home", database_url=None, ingest_database_url=None)
    vendor = load_vendor(REPO / "dags" / "vendors" / "acme_robotics.yaml")
    ctx = StepContext(settings=settings, engine=None, store=None, code_version="test")  # type: ignore[arg-type]
    step = step_class(StepName.QUALITY_PRE)(vendor, ctx)
    items = [WorkItem(key=f"episode-{i}") for i in range(3)]

    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="pipeline.steps.runner"):
        results = _run_ray(step, items, None, None, None, item_timeout_s=120)
    elapsed = time.monotonic() - started

    assert [r.status for r in results] == [StepStatus.FAILED] * len(items)
    for result in results:
        assert result.detail is not None
        assert "\n" not in result.detail, result.detail
        assert result.detail.startswith("ray: the worker could not start: RoleSetupError: "), result.detail
        assert "`sluice db up`" in result.detail, result.detail
    # Not taken for a lost node: no item went to another worker, and the run said why once.
    assert "goes to another worker" not in caplog.text
    assert caplog.text.count("could not start") == 1, caplog.text
    assert elapsed < 60, elapsed
