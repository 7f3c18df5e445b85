"""Cluster-mode fixtures: services started by the project's own code (pipeline.services), once per module."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.services.s3server import LocalS3Server, client_environment


@pytest.fixture(scope="module")
def s3_server() -> Iterator[LocalS3Server]:
    """moto's S3 server, with the environment pointing botocore (and so s3fs) at it for the module."""
    server = LocalS3Server(Path(tempfile.mkdtemp(prefix="sluice-test-s3-")))
    server.up()
    try:
        with client_environment(server):
            yield server
    finally:
        server.down()
