"""One exception tree for the whole library.

Every error Sluice raises on purpose derives from :class:`SluiceError`, so callers can catch the product's
errors apart from bugs. Constructors format the message: the bad value and what was allowed.

Two families matter to the orchestrator:

* :class:`InputError` and its children describe *bad input*. A step turns them into a recorded rejection
  with a :class:`pipeline.enums.ReasonCode` and goes on with the batch.
* :class:`InfrastructureError` describes a fault of the platform (database down, store unwritable). It is
  raised so that Airflow or Ray retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class SluiceError(Exception):
    """Root of every error Sluice raises on purpose."""


class ConfigError(SluiceError):
    """A configuration file or value is invalid.

    ``problems`` holds one ``(key_path, message)`` pair per problem so that a CLI can print all of them.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {len(self.problems)} problem(s)"]
        lines += [f"  {path or '<root>'}: {msg}" for path, msg in self.problems]
        super().__init__("\n".join(lines))


class InfrastructureError(SluiceError):
    """A platform fault (database, store, cluster): retry, do not reject the input."""


class DatabaseError(InfrastructureError):
    """The system-of-record database cannot be started, reached or migrated."""


class PostgresNotInstalledError(DatabaseError):
    def __init__(self, searched: Iterable[str]) -> None:
        where = ", ".join(searched)
        super().__init__(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
            f"{where}. Install them, e.g. `apt-get install postgresql` (Debian/Ubuntu), "
            "or set SLUICE_DATABASE_URL to use an existing server."
        )


class StoreError(InfrastructureError):
    """The raw or derived store cannot be read or written."""


class InputError(SluiceError):
    """A bad input: becomes a recorded rejection with a reason code; the batch goes on."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


class UnknownChoiceError(SluiceError, ValueError):
    """A value is not among the allowed ones."""

    def __init__(self, what: str, value: object, allowed: Iterable[object]) -> None:
        self.value = value
        self.allowed = sorted(str(a) for a in allowed)
        super().__init__(f"unknown {what} {value!r}; allowed: {', '.join(self.allowed)}")
