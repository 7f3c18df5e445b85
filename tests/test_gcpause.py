"""The cyclic garbage collector paused for a block: restored after it, counted across nesting and threads."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from pipeline.gcpause import cyclic_gc_paused


@pytest.fixture(autouse=True)
def gc_enabled() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_paused_in_the_block_and_back_after_it() -> None:
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_in_the_block_still_enables_the_collector() -> None:
    with pytest.raises(ValueError, match="boom"), cyclic_gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_the_block_stays_disabled() -> None:
    gc.disable()
    with cyclic_gc_paused():
        pass
    assert not gc.isenabled()


def test_nested_blocks_enable_the_collector_only_when_the_outer_one_ends() -> None:
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_stays_paused_until_the_last_thread_leaves_its_block() -> None:
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cyclic_gc_paused():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert entered.wait(10)
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # the other thread's block still runs
    finally:
        release.set()
        other.join(10)
    assert gc.isenabled()
