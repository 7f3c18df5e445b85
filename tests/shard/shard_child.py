"""Run by the kill -9 test in a child process: write shards from a JSON list of rows."""

from __future__ import annotations

import json
import sys

from pipeline.catalog import make_engine
from pipeline.shard import write_shards
from pipeline.store import Store


def main() -> None:
    database_url, store_url, rows_file, dataset_version_id = sys.argv[1:5]
    with open(rows_file) as fh:
        rows = json.load(fh)
    engine = make_engine(database_url)
    write_shards(
        rows,
        1,
        Store(store_url),
        "killed",
        "v1",
        engine=engine,
        config_hash="c" * 64,
        code_version="test",
        dataset_version_id=int(dataset_version_id),
    )


if __name__ == "__main__":
    main()
