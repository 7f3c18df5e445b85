"""Errors raised by the MCAP reader module.

:func:`pipeline.mcaplog.read_log` and :func:`pipeline.mcaplog.probe_structure` never raise for bad input:
they return findings. These exceptions are raised by the streaming API (:func:`iter_messages`), where a
generator has no other way to say that the file went bad, and internally by the scanner; both carry the
:class:`~pipeline.enums.ReasonCode` that the caller records.
"""

from __future__ import annotations

from pipeline.enums import ReasonCode
from pipeline.errors import InputError, SluiceError


class McapInputError(InputError):
    """The MCAP bytes are bad: truncated, corrupt, oversized or in a form we do not read.

    ``code`` is the reason to record; ``offset`` the byte offset in the file where the problem was seen
    (``None`` when it is not tied to one place).
    """

    def __init__(self, code: ReasonCode, detail: str, *, offset: int | None = None) -> None:
        self.code = code
        self.offset = offset
        where = f" (at byte {offset})" if offset is not None else ""
        super().__init__(code.value, f"{detail}{where}")


class DecodeError(SluiceError, ValueError):
    """A message payload cannot be decoded under its channel's encoding and schema."""

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        super().__init__(f"cannot decode {what}: {detail}")


class UnsupportedEncodingError(DecodeError):
    """No decoder for this message/schema encoding pair."""

    def __init__(self, message_encoding: str, schema_encoding: str | None, allowed: tuple[str, ...]) -> None:
        self.message_encoding = message_encoding
        self.schema_encoding = schema_encoding
        super().__init__(
            f"message encoding {message_encoding!r} with schema encoding {schema_encoding!r}",
            f"no decoder; supported message encodings: {', '.join(allowed)}",
        )
