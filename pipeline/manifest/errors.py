"""Errors of the manifest format and the training-side loader, rooted in :mod:`pipeline.errors`."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.errors import SluiceError, StoreError


class ManifestSchemaError(SluiceError, ValueError):
    """A table or file does not follow the manifest schema.

    ``problems`` holds one ``(column, message)`` pair per problem so that a caller can show all of them.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: not a valid manifest, {len(self.problems)} problem(s)"]
        lines += [f"  {column or '<schema>'}: {msg}" for column, msg in self.problems]
        super().__init__("\n".join(lines))


class ManifestArgumentError(SluiceError, ValueError):
    """A rank, world size, batch size or digest outside what is allowed."""

    def __init__(self, what: str, value: object, allowed: str) -> None:
        self.value = value
        super().__init__(f"{what} {value!r} is not allowed; expected {allowed}")


class ManifestIntegrityError(StoreError):
    """Downloaded or cached manifest bytes do not hash to the expected sha256."""

    def __init__(self, uri: str, expected_sha256: str, actual_sha256: str) -> None:
        self.uri = uri
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        super().__init__(
            f"manifest {uri!r} has sha256 {actual_sha256}, expected {expected_sha256}; "
            "the copy was not published to the cache"
        )


class ManifestFetchError(StoreError):
    """The manifest cannot be read from its store or written into the node-local cache."""


class ManifestUnverifiableError(ManifestFetchError):
    """No sha256 to check a manifest against: none given, and no sums file beside it."""

    def __init__(self, uri: str, sums_uri: str, detail: str) -> None:
        self.uri = uri
        super().__init__(
            f"manifest {uri!r} cannot be verified: no expected_sha256 was given and {sums_uri!r} {detail}; "
            "pass the sha256 the catalog records (sluice dataset show), or verify=False to trust the bytes"
        )


class CacheLockTimeoutError(StoreError):
    """Another process held the node cache's lock for longer than allowed."""

    def __init__(self, lock_path: str, timeout_s: float) -> None:
        self.lock_path = lock_path
        self.timeout_s = timeout_s
        super().__init__(
            f"waited {timeout_s:g} s for the manifest cache lock {lock_path}; another process on this node "
            "is still downloading (raise lock_timeout_s for very large manifests or slow stores)"
        )
