"""Curation: dataset specs (YAML with SQL), versioned builds over the warehouse, and their catalog records.

* :func:`load_spec` / :class:`DatasetSpec` – the spec file and its validated model (:mod:`.spec`);
* :func:`build` – a new immutable version: manifest files in the store, rows in the catalog (:mod:`.build`);
* :func:`list_versions`, :func:`get_version`, :func:`diff_versions` – what the catalog holds (:mod:`.versions`).
"""

from pipeline.datasets.build import build
from pipeline.datasets.errors import DatasetBuildError, DatasetVersionNotFoundError
from pipeline.datasets.spec import DatasetSpec, load_spec, spec_hash
from pipeline.datasets.versions import (
    DatasetVersion,
    VersionDiff,
    diff_versions,
    get_version,
    list_versions,
    parse_ref,
)

__all__ = [
    "DatasetBuildError",
    "DatasetSpec",
    "DatasetVersion",
    "DatasetVersionNotFoundError",
    "VersionDiff",
    "build",
    "diff_versions",
    "get_version",
    "list_versions",
    "load_spec",
    "parse_ref",
    "spec_hash",
]
