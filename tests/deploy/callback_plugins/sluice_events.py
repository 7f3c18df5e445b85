"""An Ansible callback that writes one JSON line per task result, for the deployment tests.

ansible-core 2.19 no longer ships a ``json`` stdout callback (it moved to the ``ansible.posix`` collection,
which is not installed), so the tests enable this one next to the default output:
``ANSIBLE_CALLBACK_PLUGINS=tests/deploy/callback_plugins ANSIBLE_CALLBACKS_ENABLED=sluice_events`` and
``SLUICE_ANSIBLE_EVENTS=<file>``. Results are written as Ansible hands them over, so ``no_log`` tasks
arrive censored.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sluice_events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._path = os.environ["SLUICE_ANSIBLE_EVENTS"]

    def _write(self, status: str, result: Any) -> None:
        record = {
            "play": self._play_name,
            "task": result._task.get_name(),
            "host": result._host.get_name(),
            "status": status,
            "time_s": time.time(),
            "result": result._result,
        }
        with open(self._path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")

    _play_name = ""

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._play_name = play.get_name()

    def v2_runner_on_ok(self, result: Any) -> None:
        self._write("ok", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._write("ignored" if ignore_errors else "failed", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._write("skipped", result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._write("unreachable", result)
