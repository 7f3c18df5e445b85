"""Errors of the transcode step and the post-gate (rooted in :mod:`pipeline.errors`)."""

from __future__ import annotations

from pipeline.enums import ReasonCode
from pipeline.errors import InputError, StoreError


class TranscodeInputError(InputError):
    """The source cannot be transcoded (undecodable video, a stream with no usable stamps...).

    The step records it as a rejection with ``code``; the raw file is left as it is.
    """

    def __init__(self, code: ReasonCode, detail: str) -> None:
        self.code = code
        super().__init__(code.value, detail)


class PublishError(StoreError):
    """A verified output could not be published (renamed into place) in the derived store."""

    def __init__(self, target: str, reason: str) -> None:
        self.target = target
        super().__init__(f"cannot publish {target!r}: {reason}")


class OutputVerifyError(StoreError):
    """A freshly written output does not read back as written: the bytes on disk are not trusted."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"written output {path!r} does not verify: {problem}")
