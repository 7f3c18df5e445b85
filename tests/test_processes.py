"""Worker pools whose children owe nothing to the process that started them (pipeline.processes).

The first test rebuilds what an Airflow task process is: a process whose main module imports Airflow, with
the deliberately unusable metadata-DB URL Airflow 3 sets for its tasks. A plain ``spawn`` pool breaks
there (every child re-imports the main module, hence Airflow, and dies parsing the URL: the scheduler
path's ``BrokenProcessPool``); a :class:`WorkerPool` runs.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pipeline.processes import WorkerCrashedError, WorkerPool

HERE = Path(__file__).resolve().parent

TASK_LIKE_MAIN = textwrap.dedent(
    """
    import json, multiprocessing, os, sys
    import airflow  # what the `airflow` console script, an Airflow task's main module, imports
    from concurrent.futures import ProcessPoolExecutor
    from pipeline.processes import WorkerPool

    # Airflow 3 gives its task processes this URL on purpose; children that import Airflow again die on it.
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = "airflow-db-not-allowed:///"
    if sys.argv[1] == "plain":
        pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    else:
        pool = WorkerPool(2, name="encoder")
    try:
        env = pool.submit(os.getenv, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "unset").result(timeout=120)
        print(json.dumps({"ok": True, "child_env": env}))
    except Exception as exc:
        print(json.dumps({"ok": False, "error": type(exc).__name__}))
    finally:
        pool.shutdown()
    """
)


def _run_task_like(tmp_path: Path, kind: str) -> dict[str, object]:
    script = tmp_path / "task_main.py"
    script.write_text(TASK_LIKE_MAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
    }
    done = subprocess.run(
        [sys.executable, str(script), kind],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=tmp_path,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


@pytest.mark.slow
def test_children_do_not_import_the_task_main_module_nor_keep_its_airflow_environment(
    tmp_path: Path,
) -> None:
    plain = _run_task_like(tmp_path, "plain")
    assert plain["ok"] is False and plain["error"] == "BrokenProcessPool"
    assert "Could not parse SQLAlchemy URL" in str(plain["stderr"])  # the cause, in the children's stderr
    clean = _run_task_like(tmp_path, "clean")
    assert clean["ok"] is True, clean["stderr"]
    assert clean["child_env"] == "unset"


def _segfault() -> None:
    ctypes.string_at(0)


def _exit_hard() -> None:
    os._exit(3)


def _bad_frame() -> None:
    raise ValueError("frame 7 does not decode")


def test_a_dead_worker_is_named_with_its_signal_and_first_traceback_line_and_the_pool_recovers() -> None:
    with WorkerPool(2, name="transcode encoder") as pool:
        with pytest.raises(WorkerCrashedError) as crashed:
            pool.submit(_segfault).result(timeout=60)
        message = str(crashed.value)
        assert message.startswith("transcode encoder worker died: pid ")
        assert "killed by SIGSEGV: Fatal Python error: Segmentation fault" in message
        # The next item gets a fresh pool instead of the broken one.
        assert pool.submit(sum, [1, 2, 3]).result(timeout=60) == 6
        with pytest.raises(WorkerCrashedError, match=r"exited 3"):
            pool.submit(_exit_hard).result(timeout=60)
        # An exception raised by the work itself arrives as it is: the pool is not broken by it.
        with pytest.raises(ValueError, match="frame 7"):
            pool.submit(_bad_frame).result(timeout=60)
        assert pool.submit(os.getpid).result(timeout=60) != os.getpid()


def test_work_not_started_can_be_cancelled() -> None:
    import time

    with WorkerPool(1, name="test") as pool:
        running = pool.submit(time.sleep, 1.0)
        queued = [pool.submit(time.sleep, 1.0) for _ in range(4)]
        assert queued[-1].cancel()
        assert queued[-1].cancelled()
        running.result(timeout=60)


def _pool_sum_in_this_process(out: Any) -> None:
    try:
        with WorkerPool(1, name="encoder") as pool:
            out.put(("ok", pool.submit(sum, [1, 2, 3]).result(timeout=60)))
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def test_a_pool_starts_in_a_celery_prefork_pool_process() -> None:
    """A Celery worker's prefork pool processes are billiard's daemonic forks, and the tasks they run are
    forks of those: multiprocessing refused them a child ("daemonic processes are not allowed to have
    children"), then would not pickle billiard's authkey for the spawn, so every transcode on a Celery
    worker failed."""
    billiard = pytest.importorskip("billiard")  # Celery's multiprocessing (the cluster extra)

    fork = billiard.get_context("fork")
    out = fork.Queue()
    task = fork.Process(target=_pool_sum_in_this_process, args=(out,), daemon=True)
    task.start()
    result = out.get(timeout=120)
    task.join(timeout=60)
    assert result == ("ok", 6)


def test_cancelling_what_is_left_after_a_crash_leaves_no_child_behind() -> None:
    """A caller that stops at the first failure and cancels the rest (as a sample loader does) must not
    keep the executor from terminating its other children: on Python 3.11 a future cancelled while the
    broken executor failed them killed its manager thread first, and the child left, blocked on the call
    queue's lock the dead one held, hung the parent at exit."""
    import multiprocessing
    import signal
    import time

    pool = WorkerPool(2, name="test")
    children: list[int] = []
    try:
        futures = [pool.submit(time.sleep, 0.5) for _ in range(8)]
        # the broken executor fails its futures one by one in its manager thread, running their callbacks
        # there: a slow one holds it mid-way, so that the cancels below land while it is still failing them
        futures[0].add_done_callback(lambda _: time.sleep(1.0))
        children = pool.pids()
        assert len(children) == 2
        os.kill(children[0], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(WorkerCrashedError, match=f"pid {children[0]} killed by SIGKILL"):
            for future in futures:
                future.result(timeout=60)
        assert time.monotonic() - started < 4  # the crash is reported, not waited out
        for future in futures:
            future.cancel()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            p.pid in children for p in multiprocessing.active_children()
        ):
            time.sleep(0.1)
        assert not [p.pid for p in multiprocessing.active_children() if p.pid in children]
    finally:
        for process in multiprocessing.active_children():  # never leave a child to hang the session
            if process.pid in children:
                process.kill()
        pool.shutdown()
