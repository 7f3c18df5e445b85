"""What a sample costs: bytes read, bytes decompressed, bytes used, reads, frames decoded and returned."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class ReadCounters:
    """Counters of one sample (or a sum of samples).

    * ``bytes_read`` – bytes fetched from the file (every contiguous range in full, gaps included);
    * ``bytes_decompressed`` – bytes that came out of a decompressor, plus uncompressed bytes taken as they
      are: what the reader had to parse;
    * ``bytes_used`` – message records the sample needed: the state/action messages in the window and,
      per requested frame, the compressed frames it depends on (its anchors and itself);
    * ``reads`` – separate contiguous reads (chunk fetches or range requests);
    * ``frames_decoded`` / ``frames_returned`` – pictures through the decoder / handed to the caller.
    """

    bytes_read: int = 0
    bytes_decompressed: int = 0
    bytes_used: int = 0
    reads: int = 0
    frames_decoded: int = 0
    frames_returned: int = 0
    samples: int = 0

    def add(self, other: ReadCounters) -> None:
        for name in _FIELDS:  # not asdict(), which deep-copies: this runs once per sample
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def read_amplification(self) -> float:
        return self.bytes_read / self.bytes_used if self.bytes_used else float("nan")

    @property
    def decompress_amplification(self) -> float:
        return self.bytes_decompressed / self.bytes_used if self.bytes_used else float("nan")

    @property
    def decoded_per_frame(self) -> float:
        return self.frames_decoded / self.frames_returned if self.frames_returned else float("nan")

    @property
    def reads_per_sample(self) -> float:
        return self.reads / self.samples if self.samples else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {
            **asdict(self),
            "read_amplification": self.read_amplification,
            "decompress_amplification": self.decompress_amplification,
            "decoded_per_frame": self.decoded_per_frame,
            "reads_per_sample": self.reads_per_sample,
        }


_FIELDS = tuple(f.name for f in fields(ReadCounters))
