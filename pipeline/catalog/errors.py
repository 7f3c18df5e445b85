"""Errors of the catalog layer (children of the tree in :mod:`pipeline.errors`)."""

from __future__ import annotations

from pipeline.errors import DatabaseError, SluiceError


class CatalogValueError(SluiceError, ValueError):
    """A value the catalog's schema refuses (raised before it reaches the database)."""

    def __init__(self, what: str, value: object, allowed: str) -> None:
        self.what = what
        self.value = value
        super().__init__(f"invalid {what} {value!r}; allowed: {allowed}")


class CatalogConflictError(SluiceError):
    """An idempotent write met a row with the same key but different write-once content.

    Retrying cannot help: the same key (a vendor path, a sha256, an artifact URI, a frozen dataset version)
    now names something else, and the catalog keeps what it recorded first.
    """

    def __init__(self, what: str, key: object, recorded: object, offered: object) -> None:
        self.what = what
        self.key = key
        self.recorded = recorded
        self.offered = offered
        super().__init__(f"{what} {key!r} is recorded as {recorded!r}; refusing to change it to {offered!r}")


class HistoryRewriteError(CatalogConflictError):
    """The catalog refused to rewrite history: a state that may not change so, a final step outcome."""

    def __init__(self, what: str, key: object, refusal: str) -> None:
        self.what = what
        self.key = key
        self.refusal = refusal
        SluiceError.__init__(self, f"{what} {key!r}: the catalog refused the change: {refusal}")


class CatalogMissingError(SluiceError, LookupError):
    """A row the caller named by id does not exist."""

    def __init__(self, what: str, row_id: object) -> None:
        super().__init__(f"no {what} with id {row_id!r} in the catalog")


class RoleSetupError(DatabaseError):
    """The catalog roles cannot be created or granted with the given admin connection."""


class CatalogNotMigratedError(SluiceError):
    """The catalog's schema is not at the revision this code needs (never migrated, or behind). Not an
    infrastructure fault: retrying cannot help, migrating does."""

    def __init__(self, where: str, revision: str | None, head: str) -> None:
        self.revision = revision
        self.head = head
        state = "was never migrated" if revision is None else f"is at revision {revision}"
        super().__init__(
            f"the catalog at {where} {state}; this code needs revision {head}: run `sluice db migrate`"
        )
