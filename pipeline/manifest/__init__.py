"""Training manifests: the on-disk format (:mod:`.format`) and the training-side loader (:mod:`.loader`).

Importing this package pulls in pyarrow, fsspec and filelock only, never Airflow, Ray or DuckDB, so a
training job can use the loader as it is.
"""

from pipeline.manifest.format import MANIFEST_SCHEMA, REQUIRED_COLUMNS, ManifestFiles, write_manifest
from pipeline.manifest.loader import Manifest, open_manifest, shard_range

__all__ = [
    "MANIFEST_SCHEMA",
    "REQUIRED_COLUMNS",
    "Manifest",
    "ManifestFiles",
    "open_manifest",
    "shard_range",
    "write_manifest",
]
