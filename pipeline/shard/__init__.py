"""WebDataset shards: written whole or not at all, verified against a member index, recorded with lineage.

Training reads them with the ``webdataset`` package; the tests read them back the same way.

* :mod:`.format` – the layout (sample keys ``e<episode>-<source sha256>``, member index beside each tar);
* :mod:`.writer` – :func:`write_shards`: staged, fsynced, verified, renamed, then recorded;
* :mod:`.verify` – :func:`verify_file`: a shard against its index and its record;
* :mod:`.catalog` – :func:`list_shards` (readers list shards through records only), :func:`verify_shards`;
* :mod:`.ranks` – :func:`assign_ranks`: near-equal bytes per training rank, with the planner;
"""

from pipeline.shard.catalog import ShardRecord, list_shards, verify_shards
from pipeline.shard.errors import ShardInputError, ShardVerifyError
from pipeline.shard.format import parse_sample_key, sample_key
from pipeline.shard.ranks import RankAssignment, assign_ranks
from pipeline.shard.verify import ShardIndex, Verification, verify_file
from pipeline.shard.writer import SampleSpec, ShardInfo, pack, plan_samples, write_shards

__all__ = [
    "RankAssignment",
    "SampleSpec",
    "ShardIndex",
    "ShardInfo",
    "ShardInputError",
    "ShardRecord",
    "ShardVerifyError",
    "Verification",
    "assign_ranks",
    "list_shards",
    "pack",
    "parse_sample_key",
    "plan_samples",
    "sample_key",
    "verify_file",
    "verify_shards",
    "write_shards",
]
