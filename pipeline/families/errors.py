"""Errors of the message families (rooted in :mod:`pipeline.errors`)."""

from __future__ import annotations

from pipeline.enums import ReasonCode
from pipeline.errors import InputError


class MessageFamilyError(InputError):
    """A camera, state or action message cannot be used: a format or pixel encoding we cannot take, a
    picture that does not decode or does not fit its declared layout, a vector whose names change.

    ``code`` is the reason a step records; ``frame`` the index of the message on its topic (in the order
    read) and ``offset`` the byte offset inside its payload, when the problem is tied to one place.
    """

    def __init__(
        self, code: ReasonCode, detail: str, *, frame: int | None = None, offset: int | None = None
    ) -> None:
        self.code = code
        self.frame = frame
        self.offset = offset
        super().__init__(code.value, detail)
