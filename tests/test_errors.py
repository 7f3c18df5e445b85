"""Sluice's errors survive pickling (process pools and Ray hand them across processes) with everything the
caller reads from them."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from pipeline.enums import ReasonCode
from pipeline.errors import ConfigError, InputError, SluiceError, UnknownChoiceError
from pipeline.transcode.errors import OutputVerifyError, PublishError, TranscodeInputError
from pipeline.warehouse.errors import WarehouseMissingError


@pytest.mark.parametrize(
    "error",
    [
        TranscodeInputError(ReasonCode.DECODE_ERROR, "camera front: access unit 3"),
        InputError(reason="zero_bytes", detail="empty file"),
        UnknownChoiceError("profile", "fast", ["vla", "world_model"]),
        ConfigError("acme.yaml", [("transcode.crf", "above 51")]),
        PublishError("s3://b/k", "exists"),
        OutputVerifyError("/tmp/x.mcap", "counts differ"),
        SluiceError("plain message"),
        WarehouseMissingError(Path("/data/none.duckdb")),  # an OSError too: its own construction rules
    ],
    ids=type,
)
def test_an_error_comes_back_from_pickle_whole(error: SluiceError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)


def test_an_error_that_is_also_an_oserror_keeps_its_formatted_message() -> None:
    # OSError builds itself in __new__ unless a subclass's __init__ does; recording the constructor's
    # arguments must not take that away
    error = WarehouseMissingError(Path("/data/none.duckdb"))
    assert str(error).startswith("no warehouse at /data/none.duckdb;")
    assert isinstance(error, FileNotFoundError)
