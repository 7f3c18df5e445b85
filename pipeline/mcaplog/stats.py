"""Per-topic timing statistics, accumulated while streaming and summarised at the end of a read."""

from __future__ import annotations

import hashlib
import json
import math
import re
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from mcap.records import Channel, Schema

from pipeline.enums import ReasonCode
from pipeline.mcaplog.decode import decode_json, decoder_for, ros2_has_top_level_field, stamp_ns
from pipeline.mcaplog.exceptions import DecodeError
from pipeline.mcaplog.models import Finding, FindingThresholds, TopicStats

# A channel whose first few messages carry no stamp field is not decoded further (decoding costs time).
STAMP_PROBE_MESSAGES = 3
# JSON fast path (see StampReader): agreement needed before trusting the regex, and the sampling period of
# full decodes after that (2% of messages keep being validated in full).
JSON_CONFIRM_MESSAGES = 8
JSON_FULL_DECODE_EVERY = 50
_DIGEST_MOD = 2**128
# Content digests hash every payload byte (camera frames: about half of a robot log's read time), so the
# big payloads are hashed on a helper thread while the reader decompresses and CRCs the next chunk
# (hashlib releases the GIL from 2 KiB on). Joint states and actions (hundreds of bytes) hash in about a
# microsecond, less than handing them over costs; 16 KiB is far above those and below any camera frame.
THREADED_DIGEST_MIN_BYTES = 16 << 10
# Payload bytes per batch handed to the digest thread, and batches queued before the reader waits for it:
# bounds the payloads kept alive for hashing to about (1 + 4) x 1 MiB, whatever the file's size. Batches
# of 0.5-8 MiB measured alike on robot logs; small ones keep the payloads in cache between the threads.
DIGEST_BATCH_BYTES = 1 << 20
DIGEST_BATCHES_QUEUED = 4


class StampReader:
    """Finds a channel's hardware stamp field on its first messages, then reads it from every message.

    JSON payloads get a fast path: once a top-level integer field is found and a regex agrees with the full
    decode on :data:`JSON_CONFIRM_MESSAGES` messages, the integer is picked out by the regex (a full
    ``json.loads`` of a joint-state payload costs ~15x more). Every :data:`JSON_FULL_DECODE_EVERY`-th
    message is still decoded in full and compared; any disagreement or ambiguous match (the key found
    twice, a float) turns the fast path off for the channel. Payload validity (``decode_errors``) is thus
    checked on the first messages and on that sample.
    """

    def __init__(self, schema: Schema | None, channel: Channel, fields: tuple[str, ...]) -> None:
        self.field: str | None = None
        self.errors = 0
        self._fields = fields
        self._probes_left = STAMP_PROBE_MESSAGES
        self._decode: Callable[[bytes], Any] | None = None
        self._candidate: re.Pattern[bytes] | None = None
        self._fast: re.Pattern[bytes] | None = None
        self._confirmed = 0
        self._until_check = 0
        if schema is not None and schema.encoding == "ros2msg":
            # CDR decoding is pure Python: only decode channels whose definition has a top-level stamp.
            self._fields = tuple(f for f in fields if ros2_has_top_level_field(schema, f.split(".")[0]))
        if not self._fields:
            return
        try:
            self._decode = decoder_for(schema, channel.message_encoding)
        except DecodeError:
            self.errors += 1  # the schema itself does not load: nothing on this channel can be decoded
            self._decode = None

    @property
    def active(self) -> bool:
        return self._decode is not None and (self.field is not None or self._probes_left > 0)

    def read(self, data: bytes) -> int | None:
        if self._fast is not None:
            self._until_check -= 1
            if self._until_check > 0:
                found = self._fast.findall(data)
                if len(found) == 1:
                    return int(found[0])
            self._until_check = JSON_FULL_DECODE_EVERY
        value = self._read_decoded(data)
        if self._candidate is not None:
            found = self._candidate.findall(data)
            if value is None or len(found) != 1 or int(found[0]) != value:
                self._candidate = self._fast = None
            elif self._fast is None:
                self._confirmed += 1
                if self._confirmed >= JSON_CONFIRM_MESSAGES:
                    self._fast = self._candidate
                    self._until_check = JSON_FULL_DECODE_EVERY
        return value

    def _read_decoded(self, data: bytes) -> int | None:
        assert self._decode is not None
        try:
            decoded = self._decode(data)
        except DecodeError:
            self.errors += 1
            if self.field is None:
                self._probes_left -= 1
            return None
        if self.field is not None:
            return stamp_ns(decoded, self.field)
        self._probes_left -= 1
        for path in self._fields:
            value = stamp_ns(decoded, path)
            if value is not None:
                self.field = path
                if self._decode is decode_json and "." not in path:
                    key = re.escape(json.dumps(path).encode())
                    self._candidate = re.compile(rb"%s\s*:\s*(-?\d+)(?=\s*[,}])" % key)
                return value
        return None


def message_digest(log_time: int, data: bytes) -> int:
    """One message's share of its topic's content digest (the digest is the sum of these, mod 2**128)."""
    h = hashlib.blake2b(log_time.to_bytes(8, "little"), digest_size=16)
    h.update(data)
    return int.from_bytes(h.digest(), "little")


def _digest_batch(batch: list[tuple[TopicAccumulator, int, bytes]]) -> dict[TopicAccumulator, int]:
    """Per-topic sums of a batch's message digests (runs on the digest thread; touches no accumulator)."""
    sums: dict[TopicAccumulator, int] = {}
    for acc, log_time, data in batch:
        sums[acc] = sums.get(acc, 0) + message_digest(log_time, data)
    return sums


class DigestThread:
    """Hashes big payloads for :class:`TopicAccumulator` content digests on one helper thread.

    Only the reading thread touches the accumulators: the helper returns per-topic partial sums, which
    :meth:`drain` (or the queue bound) adds in. The sum is order-independent, so the digests are exactly
    those of hashing inline. Call :meth:`drain` before :meth:`TopicAccumulator.finish`, and :meth:`close`
    in any case (it drops what is still queued).
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcap-digest")
        self._batch: list[tuple[TopicAccumulator, int, bytes]] = []
        self._batch_bytes = 0
        self._queued: deque[Future[dict[TopicAccumulator, int]]] = deque()

    def add(self, acc: TopicAccumulator, log_time: int, data: bytes) -> None:
        self._batch.append((acc, log_time, data))
        self._batch_bytes += len(data)
        if self._batch_bytes >= DIGEST_BATCH_BYTES:
            self._submit()
            while len(self._queued) > DIGEST_BATCHES_QUEUED:
                self._take(self._queued.popleft())

    def drain(self) -> None:
        """Wait for every payload handed over so far and add its digest to its topic."""
        self._submit()
        while self._queued:
            self._take(self._queued.popleft())

    def close(self) -> None:
        self._queued.clear()  # shutdown cancels what has not started
        self._batch = []
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self) -> None:
        if self._batch:
            self._queued.append(self._pool.submit(_digest_batch, self._batch))
            self._batch = []
            self._batch_bytes = 0

    @staticmethod
    def _take(future: Future[dict[TopicAccumulator, int]]) -> None:
        for acc, part in future.result().items():
            acc.add_digest(part)


class TopicAccumulator:
    """Everything measured about one topic during the pass; :meth:`finish` turns it into stats.

    With ``digest``, payloads of :data:`THREADED_DIGEST_MIN_BYTES` or more are hashed on ``digest_thread``
    when one is given (it must be drained before :meth:`finish`), the others inline.
    """

    def __init__(
        self,
        topic: str,
        channel: Channel,
        schema: Schema | None,
        *,
        digest: bool,
        digest_thread: DigestThread | None = None,
    ) -> None:
        self.topic = topic
        self.channel_ids: list[int] = [channel.id]
        self.message_encoding = channel.message_encoding
        self.schema = schema
        self.schema_sha256 = hashlib.sha256(schema.data).hexdigest() if schema is not None else None
        # log times in file order; 8 bytes per message keeps a one-hour 200 Hz topic under 6 MB
        self.log_times = array("Q")
        self.payload_bytes = 0
        self.backward_steps = 0
        self.max_backward_step_ns = 0
        self.first_backward_at_ns: int | None = None
        self._last: int | None = None
        self.skew_min: int | None = None
        self.skew_max: int | None = None
        self.skew_sum = 0
        # log time - stamp of every stamped message, for the median and the 99th percentile (8 bytes each,
        # like log_times)
        self.skews = array("q")
        self.stamped = 0
        self.stamp_field: str | None = None
        self.decode_errors = 0
        self._digest = 0 if digest else None
        self._digest_thread = digest_thread

    def add(self, log_time: int, data: bytes) -> None:
        self.log_times.append(log_time)
        self.payload_bytes += len(data)
        last = self._last
        if last is not None and log_time < last:
            self.backward_steps += 1
            self.max_backward_step_ns = max(self.max_backward_step_ns, last - log_time)
            if self.first_backward_at_ns is None:
                self.first_backward_at_ns = log_time
        self._last = log_time
        if self._digest is not None:
            # A sum of per-message hashes: independent of order, so re-chunked messages give the same digest.
            if self._digest_thread is not None and len(data) >= THREADED_DIGEST_MIN_BYTES:
                self._digest_thread.add(self, log_time, data)
            else:
                self._digest = (self._digest + message_digest(log_time, data)) % _DIGEST_MOD

    def add_digest(self, part: int) -> None:
        """Add a partial sum of message digests computed elsewhere (see :class:`DigestThread`)."""
        assert self._digest is not None
        self._digest = (self._digest + part) % _DIGEST_MOD

    def add_stamp(self, log_time: int, stamp: int) -> None:
        skew = log_time - stamp
        self.skews.append(skew)
        self.stamped += 1
        self.skew_sum += skew
        self.skew_min = skew if self.skew_min is None else min(self.skew_min, skew)
        self.skew_max = skew if self.skew_max is None else max(self.skew_max, skew)

    def finish(
        self,
        *,
        episode_start_ns: int | None,
        episode_end_ns: int | None,
        expected_rate_hz: float | None,
        thresholds: FindingThresholds,
        schema_drift: bool,
    ) -> tuple[TopicStats, list[Finding]]:
        times = np.frombuffer(self.log_times, dtype=np.uint64)
        count = int(times.size)
        sorted_times = np.sort(times)
        intervals = np.diff(sorted_times)  # non-negative: sorted
        duplicates = int(np.count_nonzero(intervals == 0))
        start = int(sorted_times[0]) if count else None
        end = int(sorted_times[-1]) if count else None
        rate_hz: float | None = None
        if start is not None and end is not None and end > start:
            rate_hz = (count - 1) / ((end - start) / 1e9)
        positive = intervals[intervals > 0]
        median_interval = int(np.median(positive)) if positive.size else None
        largest_jump = int(intervals.max()) if intervals.size else 0
        largest_jump_at = int(sorted_times[int(intervals.argmax())]) if intervals.size else None

        expected_count: int | None = None
        gap_rate: float | None = None
        if expected_rate_hz and episode_start_ns is not None and episode_end_ns is not None:
            # Against the whole episode's span: a stream that starts late or stops early is missing messages.
            expected_count = math.floor((episode_end_ns - episode_start_ns) / 1e9 * expected_rate_hz) + 1
            gap_rate = max(0, expected_count - count) / expected_count

        skew_median: int | None = None
        skew_abs_p99: int | None = None
        if self.skews:
            skews = np.frombuffer(self.skews, dtype=np.int64)
            skew_median = int(np.median(skews))
            # "higher": an observed value, never one interpolated between two messages
            skew_abs_p99 = int(np.percentile(np.abs(skews), 99, method="higher"))
        schema = self.schema
        stats = TopicStats(
            topic=self.topic,
            channel_ids=tuple(self.channel_ids),
            message_encoding=self.message_encoding,
            schema_name=schema.name if schema is not None else None,
            schema_encoding=schema.encoding if schema is not None else None,
            schema_sha256=self.schema_sha256,
            message_count=count,
            payload_bytes=self.payload_bytes,
            start_ns=start,
            end_ns=end,
            rate_hz=rate_hz,
            median_interval_ns=median_interval,
            expected_rate_hz=expected_rate_hz,
            expected_count=expected_count,
            gap_rate=gap_rate,
            backward_steps=self.backward_steps,
            max_backward_step_ns=self.max_backward_step_ns,
            duplicate_log_times=duplicates,
            largest_jump_ns=largest_jump,
            largest_jump_at_ns=largest_jump_at,
            stamp_field=self.stamp_field,
            stamped_count=self.stamped,
            skew_min_ns=self.skew_min,
            skew_max_ns=self.skew_max,
            skew_mean_ns=self.skew_sum / self.stamped if self.stamped else None,
            skew_median_ns=skew_median,
            skew_abs_p99_ns=skew_abs_p99,
            decode_errors=self.decode_errors,
            content_digest=f"{self._digest:032x}" if self._digest is not None else None,
        )
        return stats, _timing_findings(stats, thresholds, schema_drift)


def _timing_findings(stats: TopicStats, thresholds: FindingThresholds, schema_drift: bool) -> list[Finding]:
    topic = stats.topic
    found: list[Finding] = []
    if schema_drift:
        found.append(
            Finding(
                code=ReasonCode.SCHEMA_DRIFT,
                detail=f"{topic}: channels {list(stats.channel_ids)} of one topic "
                "disagree on schema or encoding",
                topic=topic,
            )
        )
    if stats.backward_steps:
        found.append(
            Finding(
                code=ReasonCode.NON_MONOTONIC_TIME,
                detail=f"{topic}: log time steps backwards {stats.backward_steps} time(s), "
                f"by up to {stats.max_backward_step_ns} ns",
                topic=topic,
            )
        )
    if stats.duplicate_log_times:
        found.append(
            Finding(
                code=ReasonCode.DUPLICATE_TIMESTAMPS,
                detail=f"{topic}: {stats.duplicate_log_times} message(s) repeat an earlier log time",
                topic=topic,
            )
        )
    if stats.expected_rate_hz:
        period_ns = 1e9 / stats.expected_rate_hz
    else:
        period_ns = float(stats.median_interval_ns or 0)
    jump_limit_ns = max(thresholds.clock_jump_ns, thresholds.clock_jump_periods * period_ns)
    jump = max(stats.largest_jump_ns, stats.max_backward_step_ns)
    if jump > jump_limit_ns:
        found.append(
            Finding(
                code=ReasonCode.CLOCK_JUMP,
                detail=f"{topic}: log time jumps {jump} ns (at {stats.largest_jump_at_ns}); "
                f"limit {int(jump_limit_ns)} ns",
                topic=topic,
            )
        )
    if stats.gap_rate is not None and stats.gap_rate > thresholds.max_gap_rate:
        found.append(
            Finding(
                code=ReasonCode.GAP_RATE_HIGH,
                detail=f"{topic}: {stats.message_count} of {stats.expected_count} expected messages at "
                f"{stats.expected_rate_hz} Hz "
                f"(gap rate {stats.gap_rate:.4f}, limit {thresholds.max_gap_rate})",
                topic=topic,
            )
        )
    if stats.skew_min_ns is not None and stats.skew_max_ns is not None:
        worst = max(abs(stats.skew_min_ns), abs(stats.skew_max_ns))
        if worst > thresholds.max_clock_skew_ns:
            found.append(
                Finding(
                    code=ReasonCode.CLOCK_SKEW,
                    detail=f"{topic}: log time - {stats.stamp_field} "
                    f"spans {stats.skew_min_ns}..{stats.skew_max_ns} ns "
                    f"(limit ±{thresholds.max_clock_skew_ns} ns)",
                    topic=topic,
                )
            )
    if stats.decode_errors:
        found.append(
            Finding(
                code=ReasonCode.DECODE_ERROR,
                detail=f"{topic}: {stats.decode_errors} payload(s) do not decode as {stats.message_encoding}"
                + (f" / {stats.schema_name}" if stats.schema_name else ""),
                topic=topic,
            )
        )
    return found
