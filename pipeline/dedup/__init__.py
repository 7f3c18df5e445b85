"""Near-duplicate grouping across episodes and vendors.

* :mod:`.grouping` – pure logic: :class:`Fingerprint` per episode (video pHashes, message fingerprint),
  candidate pairs through an exact Hamming range search (:mod:`.search`), exact checks, union-find into :class:`Group` s, and
  :func:`pick_representatives` (one episode kept per group).
* :mod:`.catalog` – read fingerprints from the annotations and record each episode's group as annotations
  (``dedup.group``, ``dedup.group_size``, ``dedup.representative``) for the warehouse and dataset specs.
"""

from pipeline.dedup.catalog import GROUP_ANNOTATOR, load_fingerprints, record_groups, run_dedup
from pipeline.dedup.grouping import (
    DedupParams,
    Fingerprint,
    Group,
    Grouping,
    find_groups,
    group_near_duplicates,
    pick_representatives,
    video_match,
)

__all__ = [
    "GROUP_ANNOTATOR",
    "DedupParams",
    "Fingerprint",
    "Group",
    "Grouping",
    "find_groups",
    "group_near_duplicates",
    "load_fingerprints",
    "pick_representatives",
    "record_groups",
    "run_dedup",
    "video_match",
]
