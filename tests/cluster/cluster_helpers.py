"""What the cluster test modules share."""

from __future__ import annotations

import os

import pytest


def opt_in(what: str) -> pytest.MarkDecorator:
    """Skip unless ``make test-cluster`` (``SLUICE_TEST_CLUSTER=1``) asked for the tests that start ``what``."""
    return pytest.mark.skipif(
        not os.environ.get("SLUICE_TEST_CLUSTER"),
        reason=f"`make test-cluster` (SLUICE_TEST_CLUSTER=1) {what}",
    )
