"""``Daemon``: readiness counts only from the very process that was started, still alive."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.services.daemon import Daemon, ServiceError, claim_port, free_port, port_free


def test_a_process_that_exits_is_a_failed_start_even_when_something_answers(tmp_path: Path) -> None:
    """What another program on the service's port does: it answers (``ready`` holds) while ours, unable to
    bind there, exits. The start fails, with the last lines of the log, instead of claiming success."""

    def stranger_answers() -> bool:
        time.sleep(0.5)  # the answer takes a moment, in which our process gives up
        return True

    daemon = Daemon(
        "svc",
        ["sh", "-c", "echo 'Port 20976 is in use by another program'; exit 1"],
        run_dir=tmp_path,
        log_dir=tmp_path,
        ready=stranger_answers,
    )
    with pytest.raises(ServiceError) as failed:
        daemon.start(timeout_s=10)
    said = str(failed.value)
    assert "svc exited during start-up" in said and str(daemon.log_file) in said, said
    assert "Port 20976 is in use by another program" in said, said


def test_a_running_process_that_answers_is_ready(tmp_path: Path) -> None:
    daemon = Daemon("svc", ["sleep", "30"], run_dir=tmp_path, log_dir=tmp_path, ready=lambda: True)
    pid = daemon.start(timeout_s=10)
    try:
        assert daemon.live_pid() == pid
    finally:
        assert daemon.stop()


def test_claim_port_keeps_a_free_port_and_gives_up_a_taken_one(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "svc.port"
    port, given_up = claim_port(path, "127.0.0.1")
    assert given_up is None and int(path.read_text()) == port
    assert claim_port(path, "127.0.0.1") == (port, None)  # a restart serves where it did
    with socket.socket() as holder:  # another program listens there now (on every address)
        holder.bind(("0.0.0.0", port))
        holder.listen()
        assert not port_free("127.0.0.1", port)
        moved, given_up = claim_port(path, "127.0.0.1")
    assert given_up == port and moved != port and int(path.read_text()) == moved
    assert port_free("127.0.0.1", free_port())
