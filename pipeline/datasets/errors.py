"""Errors of dataset specs and builds (children of the tree in :mod:`pipeline.errors`)."""

from __future__ import annotations

from pipeline.errors import SluiceError


class DatasetBuildError(SluiceError):
    """A dataset cannot be built from its spec over the current warehouse (the SQL fails, nothing matches)."""

    def __init__(self, name: str, detail: str) -> None:
        self.name = name
        self.detail = detail
        super().__init__(f"dataset {name!r}: {detail}")


class DatasetVersionNotFoundError(SluiceError, LookupError):
    """A dataset version named on the command line is not in the catalog."""

    def __init__(self, ref: str, known: list[str]) -> None:
        self.ref = ref
        shown = ", ".join(known[-10:]) if known else "none"
        super().__init__(f"no dataset version {ref!r} in the catalog; known versions: {shown}")
