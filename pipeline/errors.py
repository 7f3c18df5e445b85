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

import functools
from collections.abc import Iterable, Sequence
from typing import Any


class SluiceError(Exception):
    """Root of every error Sluice raises on purpose.

    Errors cross process boundaries (a camera encode in a process pool, a Ray task), so they must pickle.
    Python pickles an exception as ``type(e)(*e.args)``, and ``args`` holds the formatted message, not what
    a constructor that formats it took; such constructors record their arguments here instead, so that
    every subclass comes back whole.
    """

    _init_arguments: tuple[tuple[Any, ...], dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return  # the inherited constructor records (or the default pickling serves)

        @functools.wraps(init)
        def recording_init(self: SluiceError, *args: Any, **kwargs: Any) -> None:
            if not hasattr(self, "_init_arguments"):  # the outermost constructor: what the caller passed
                self._init_arguments = (args, kwargs)
            init(self, *args, **kwargs)

        cls.__init__ = recording_init  # type: ignore[method-assign,assignment]

    def __reduce__(self) -> str | tuple[Any, ...]:
        if not hasattr(self, "_init_arguments"):
            return super().__reduce__()
        args, kwargs = self._init_arguments
        return (_rebuild, (type(self), args, kwargs), self.__dict__)


def _rebuild(cls: type[SluiceError], args: tuple[Any, ...], kwargs: dict[str, Any]) -> SluiceError:
    return cls(*args, **kwargs)


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
