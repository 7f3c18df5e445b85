"""The pre-gate's look into camera and named-vector messages, during its one read of the log.

:func:`content_probes` gives :func:`pipeline.mcaplog.read_log` one probe per contract topic that needs one:

* a camera (any family of :data:`~pipeline.families.table.CAMERA_FAMILIES`): every message's picture is
  taken out of its envelope and its format (or raw pixel encoding) and size are recorded; a raw picture's
  ``step`` and length are checked against its size; every still image's structure is checked (a JPEG
  walked marker by marker, a PNG's chunk CRCs) and every ``decode_every``-th one decoded in full; a video
  is decoded up to its first picture (its size). A frame that fails any of these is a
  :class:`~pipeline.mcaplog.ContentProblem` with its frame index, log time and byte offset.
* a state or action stream whose type names its vector entries (``JointState``) or whose contract picks
  fields: every message is read into its record, so a name set that changes mid-episode or a field that
  goes missing is found here, not when the transcode resamples.

The probes measure; :mod:`pipeline.quality.robot` judges what they found against the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcap.records import Channel, Schema

from pipeline.enums import ReasonCode
from pipeline.families.errors import MessageFamilyError
from pipeline.families.frames import FrameDecoder, read_payload
from pipeline.families.series import SeriesReader
from pipeline.families.structure import check_image, image_size
from pipeline.families.table import FrameKind, camera_family
from pipeline.mcaplog.decode import decoder_for
from pipeline.mcaplog.exceptions import DecodeError
from pipeline.mcaplog.models import ContentProblem, ContentStats

if TYPE_CHECKING:
    from pipeline.config import TopicContract
    from pipeline.mcaplog.read import ProbeFactory

#: Problems kept per topic (all are counted): the first few say what and where; the rest add nothing.
MAX_PROBLEMS = 5


class _Probe:
    kind = ""

    def __init__(self, schema: Schema | None, channel: Channel) -> None:
        self.topic = channel.topic
        self.messages = 0
        self.decoded = 0
        self.problems: list[ContentProblem] = []
        self.problem_count = 0
        self.family: str | None = None
        self._decode: Callable[[bytes], Any] | None = None
        try:
            self._decode = decoder_for(schema, channel.message_encoding)
        except DecodeError as exc:
            self._problem(ReasonCode.DECODE_ERROR, f"{self.topic}: {exc}", None, None)

    def _problem(
        self,
        code: ReasonCode,
        detail: str,
        frame: int | None,
        log_time: int | None,
        offset: int | None = None,
    ) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(
                ContentProblem(code=code, detail=detail, frame=frame, log_time_ns=log_time, offset=offset)
            )

    def _decoded(self, index: int, log_time: int, data: bytes) -> Any:
        """The decoded message, or None (a problem recorded) when it does not decode."""
        if self._decode is None:
            return None
        try:
            return self._decode(data)
        except DecodeError as exc:
            self._problem(ReasonCode.DECODE_ERROR, f"{self.topic}: message {index}: {exc}", index, log_time)
            return None


class CameraProbe(_Probe):
    """See the module docstring; ``decode_every``: every n-th still image is decoded in full."""

    kind = "camera"

    def __init__(self, schema: Schema | None, channel: Channel, *, decode_every: int) -> None:
        super().__init__(schema, channel)
        self._family = camera_family(schema.name if schema is not None else None)
        self.family = self._family.name if self._family is not None else None
        self._decode_every = max(1, decode_every)
        self._decoder: FrameDecoder | None = None
        self._video_sized = False
        self.formats: dict[str, None] = {}
        self.sizes: dict[tuple[int, int], None] = {}

    def add(self, log_time: int, data: bytes) -> None:
        index = self.messages
        self.messages += 1
        if self._family is None:
            return  # not a camera type we know: the contract check says so once, not per frame
        decoded = self._decoded(index, log_time, data)
        if decoded is None:
            return
        try:
            payload = read_payload(self._family, decoded, frame=index, what=self.topic)
            self.formats.setdefault(payload.format)
            kind = self._family.kind
            if payload.raw is not None:
                self.sizes.setdefault((payload.raw.width, payload.raw.height))
                return
            if kind is FrameKind.IMAGE:
                size = image_size(payload.format, payload.data)
                if size is not None:
                    self.sizes.setdefault(size)
            if self._decoder is None or self._decoder.format != payload.format:
                self._decoder = FrameDecoder(kind, payload.format, what=self.topic)
            if kind is FrameKind.VIDEO:
                if not self._video_sized:
                    for frame in self._decoder.decode(index, payload):
                        self.sizes.setdefault((frame.width, frame.height))
                        self._video_sized = True
                        self.decoded += 1
                return
            # still image: the structure of every one, a full decode of a sample
            check_image(self.topic, index, payload.format, payload.data)
            if index % self._decode_every == 0:
                for frame in self._decoder.decode(index, payload):
                    self.sizes.setdefault((frame.width, frame.height))
                    self.decoded += 1
        except MessageFamilyError as exc:
            self._problem(exc.code, exc.detail, index, log_time, exc.offset)
            self._decoder = None  # a decoder that failed may hold a broken state: start the next afresh

    def result(self) -> ContentStats:
        first = next(iter(self.sizes), None)
        return ContentStats(
            kind=self.kind,
            family=self.family,
            messages=self.messages,
            decoded=self.decoded,
            formats=tuple(self.formats),
            sizes=tuple(f"{w}x{h}" for w, h in self.sizes),
            width_px=first[0] if first else None,
            height_px=first[1] if first else None,
            problems=tuple(self.problems),
            problem_count=self.problem_count,
        )


class SeriesProbe(_Probe):
    """Reads every message of a state or action stream into its record (see the module docstring)."""

    kind = "series"

    def __init__(
        self, schema: Schema | None, channel: Channel, *, fields: tuple[str, ...], stamp_field: str | None
    ) -> None:
        super().__init__(schema, channel)
        self._reader = SeriesReader(
            channel.topic,
            schema.name if schema is not None else None,
            channel.message_encoding,
            fields=fields,
            stamp_field=stamp_field,
        )
        self.family = self._reader.family.name if self._reader.family is not None else None
        # a stream taken whole (JSON) has nothing to check here: its stamps are read on a fast path
        self._active = bool(fields) or self._reader.names_field is not None
        self._failed = False

    def add(self, log_time: int, data: bytes) -> None:
        index = self.messages
        self.messages += 1
        if self._failed or not self._active:
            return  # the first problem of a stream says it; reading on only repeats it
        decoded = self._decoded(index, log_time, data)
        if decoded is None:
            return
        try:
            self._reader.record(decoded, index)
            self.decoded += 1
        except MessageFamilyError as exc:
            self._problem(exc.code, exc.detail, index, log_time)
            self._failed = True

    def result(self) -> ContentStats:
        return ContentStats(
            kind=self.kind,
            family=self.family,
            messages=self.messages,
            decoded=self.decoded,
            names=tuple(self._reader.names or ()),
            problems=tuple(self.problems),
            problem_count=self.problem_count,
        )


def content_probes(contract: TopicContract | None, *, decode_every: int) -> dict[str, ProbeFactory]:
    """The probe factory of every contract topic that gets one (see the module docstring)."""
    if contract is None:
        return {}
    out: dict[str, ProbeFactory] = {}
    for camera in contract.cameras:
        out[camera.topic] = lambda schema, channel: CameraProbe(schema, channel, decode_every=decode_every)
    for spec in (*contract.state, *contract.actions):
        fields = tuple(getattr(spec, "fields", ()))

        def series(
            schema: Schema | None,
            channel: Channel,
            fields: tuple[str, ...] = fields,
            stamp: str | None = spec.stamp_field,
        ) -> Any:
            return SeriesProbe(schema, channel, fields=fields, stamp_field=stamp)

        out[spec.topic] = series
    return out
