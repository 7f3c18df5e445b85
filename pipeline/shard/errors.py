"""Errors of the shard writer and verifier."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.enums import ReasonCode
from pipeline.errors import InfrastructureError, InputError, SluiceError


class ShardVerifyError(InfrastructureError):
    """A shard does not read back as written (staging) or as recorded (published): never publish or use it."""

    def __init__(self, shard: str, problems: Sequence[str]) -> None:
        self.shard = shard
        self.problems = list(problems)
        super().__init__(f"shard {shard} failed verification: {'; '.join(self.problems[:5])}")


class ShardInputError(InputError):
    """A manifest row cannot become a sample (its artifact is missing, its key fields are malformed)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ReasonCode.SHARD_VERIFY_FAILED.value, detail)


class NoShardsError(SluiceError, LookupError):
    """Shards were asked of a dataset version that has none recorded: verifying them would check nothing."""

    def __init__(self, dataset_version: str) -> None:
        self.dataset_version = dataset_version
        super().__init__(
            f"no shards are recorded for {dataset_version}: `sluice shard {dataset_version}` writes them"
        )


class ShardPlanConflictError(SluiceError, ValueError):
    """A version's shards are recorded already, cut otherwise than this request would cut them (another
    target size): writing would leave the old shards beside the new ones, their samples twice."""

    def __init__(self, dataset_version: str, detail: str) -> None:
        self.dataset_version = dataset_version
        super().__init__(
            f"{dataset_version} is sharded already, otherwise: {detail}. A version's shards stay as recorded "
            "(runs and lineage name them): shard it with the target size it was sharded with (the default "
            "unless one was given), or build a new version to cut differently"
        )
