"""Dataset versions as the catalog (Postgres) records them: list, show, diff, and what a build reads first.

The catalog, not the warehouse, is read here: the warehouse may be a sync behind, while a version number or
a frozen evaluation set must never be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.catalog.models import DatasetVersion as DatasetVersionRow
from pipeline.catalog.models import DatasetVersionEpisode, Manifest, ManifestFormat
from pipeline.datasets.errors import DatasetVersionNotFoundError
from pipeline.enums import Split
from pipeline.errors import SluiceError, UnknownChoiceError

#: Versions are numbered ``v1``, ``v2``, ... per dataset name, in build order.
VERSION_PATTERN = re.compile(r"v([1-9][0-9]*)")
#: Episode ids shown per category by a diff (the counts are always complete).
DIFF_EXAMPLES = 10
#: Key of a version's recorded spec JSON that holds the build's near-duplicate report instead of a spec field
#: (a leading underscore, which no spec field has). :func:`spec_record` adds it, loading takes it out again.
NEAR_DUPLICATES_KEY = "_near_duplicates"
#: Key of the recorded spec JSON that holds the manifest's rows per split (a video episode is one row per
#: clip, so rows and episodes differ); versions built before it was recorded have none.
SPLIT_ROWS_KEY = "_split_rows"


@dataclass(frozen=True)
class DatasetVersion:
    """One built version of a dataset: what ``build`` returns and ``list``/``show`` print."""

    id: int
    name: str
    version: str
    spec_hash: str
    created_at: datetime | None
    manifest_uri: str | None  # the Arrow IPC file training ranks memory-map
    manifest_sha256: str | None
    parquet_uri: str | None
    parquet_sha256: str | None
    row_count: int  # manifest rows: one per robot episode, one per clip of a video episode
    split_episodes: dict[str, int]  # episodes per split
    split_rows: dict[str, int] | None  # manifest rows per split (None: built before rows were recorded)
    created: bool = False  # True when this build made the version, False when it found it already there
    counts: dict[str, int] = field(default_factory=dict)  # what the build dropped, by step (build only)
    spec: dict[str, Any] | None = None
    #: Per near-duplicate group that lost members: ``{"group", "kept", "dropped"}`` (see ``select.Selection``).
    near_duplicates: list[dict[str, Any]] = field(default_factory=list)
    #: What a user must know about the splits (an empty one); see :func:`split_warnings`.
    warnings: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def as_dict(self) -> dict[str, Any]:
        data = self.__dict__.copy()
        data["ref"] = self.ref
        data["created_at"] = self.created_at.isoformat() if self.created_at else None
        return data


@dataclass(frozen=True)
class VersionDiff:
    """How two versions' episodes compare: counts per (split in a, split in b), None = absent."""

    a: str
    b: str
    transitions: dict[tuple[str | None, str | None], int]
    examples: dict[tuple[str | None, str | None], list[int]]

    @property
    def only_in_a(self) -> int:
        return sum(n for (sa, sb), n in self.transitions.items() if sb is None)

    @property
    def only_in_b(self) -> int:
        return sum(n for (sa, sb), n in self.transitions.items() if sa is None)

    @property
    def moved(self) -> int:
        return sum(n for (sa, sb), n in self.transitions.items() if sa and sb and sa != sb)

    @property
    def unchanged(self) -> int:
        return sum(n for (sa, sb), n in self.transitions.items() if sa and sa == sb)

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "moved": self.moved,
            "unchanged": self.unchanged,
            "transitions": [
                {"split_a": sa, "split_b": sb, "episodes": n, "examples": self.examples.get((sa, sb), [])}
                for (sa, sb), n in sorted(
                    self.transitions.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
                )
            ],
        }


def spec_record(
    spec: dict[str, Any], near_duplicates: list[dict[str, Any]], split_rows: dict[str, int]
) -> dict[str, Any]:
    """What a version records in its ``spec`` column: the spec, the build's near-duplicate report and the
    manifest's rows per split."""
    return {**spec, NEAR_DUPLICATES_KEY: near_duplicates, SPLIT_ROWS_KEY: split_rows}


def split_warnings(spec: dict[str, Any], split_episodes: dict[str, int]) -> list[str]:
    """A sentence per split that came out empty although the spec gives it a share: too few groups (e.g. two
    sessions grouped by session cannot fill three splits), or a share too small for the groups there are.
    Training on it would silently validate or evaluate on nothing."""
    splits = spec.get("splits") or {}
    share = {
        Split.TRAIN.value: 1.0 - float(splits.get("val_fraction", 0)) - float(splits.get("eval_fraction", 0)),
        Split.VAL.value: float(splits.get("val_fraction", 0)),
        Split.EVAL.value: float(splits.get("eval_fraction", 0)),
    }
    total = sum(split_episodes.values())
    group_by = ", ".join(splits.get("group_by") or ())
    return [
        f"split {split} is empty although the spec gives it {share[split]:.0%} of the groups: the "
        f"{total} episode(s) fall into too few groups of ({group_by}) to fill every split"
        for split in (s.value for s in Split)
        if share[split] > 0 and split_episodes.get(split, 0) == 0
    ]


def parse_ref(ref: str, default_name: str | None = None) -> tuple[str, str]:
    """``name@version`` (or a bare ``version`` when ``default_name`` is given) → (name, version)."""
    if "@" in ref:
        name, _, version = ref.partition("@")
    elif default_name is not None:
        name, version = default_name, ref
    else:
        raise SluiceError(f"dataset version {ref!r} must be written name@version, e.g. pick_place@v3")
    if not name or not version:
        raise SluiceError(f"dataset version {ref!r} must be written name@version, e.g. pick_place@v3")
    return name, version


def next_version(session: Session, name: str) -> str:
    """The version a new build of ``name`` gets: one past the highest ``v<N>`` recorded."""
    recorded = session.execute(
        select(DatasetVersionRow.version).where(DatasetVersionRow.name == name)
    ).scalars()
    numbers = [int(m.group(1)) for v in recorded if (m := VERSION_PATTERN.fullmatch(v))]
    return f"v{max(numbers, default=0) + 1}"


def frozen_eval_episodes(session: Session, name: str) -> frozenset[int] | None:
    """The frozen evaluation set of ``name``: the eval episodes of its first version that had any.

    None when no version of ``name`` has eval episodes yet (the next build draws them).
    """
    first = (
        select(DatasetVersionRow.id)
        .join(DatasetVersionEpisode, DatasetVersionEpisode.dataset_version_id == DatasetVersionRow.id)
        .where(DatasetVersionRow.name == name, DatasetVersionEpisode.split == Split.EVAL.value)
        .order_by(DatasetVersionRow.id)
        .limit(1)
    )
    first_id = session.execute(first).scalar_one_or_none()
    if first_id is None:
        return None
    episodes = session.execute(
        select(DatasetVersionEpisode.episode_id).where(
            DatasetVersionEpisode.dataset_version_id == first_id,
            DatasetVersionEpisode.split == Split.EVAL.value,
        )
    ).scalars()
    return frozenset(episodes)


def latest_version(session: Session, name: str) -> DatasetVersion | None:
    row_id = session.execute(
        select(DatasetVersionRow.id)
        .where(DatasetVersionRow.name == name)
        .order_by(DatasetVersionRow.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    return None if row_id is None else _load(session, row_id)


def list_versions(session: Session, name: str | None = None) -> list[DatasetVersion]:
    """Every recorded version (of ``name`` only, when given), oldest first."""
    stmt = select(DatasetVersionRow.id).order_by(DatasetVersionRow.name, DatasetVersionRow.id)
    if name is not None:
        stmt = stmt.where(DatasetVersionRow.name == name)
    return [_load(session, row_id) for row_id in session.execute(stmt).scalars()]


def require_dataset(session: Session, name: str) -> None:
    """Raise :class:`~pipeline.errors.UnknownChoiceError` naming the recorded datasets unless ``name`` is one
    of them: a listing of a misspelt dataset must not answer with an empty, successful table."""
    known = set(session.execute(select(DatasetVersionRow.name)).scalars())
    if name not in known:
        raise UnknownChoiceError("dataset", name, known or ["(no dataset version recorded yet)"])


def get_version(session: Session, name: str, version: str) -> DatasetVersion:
    row_id = session.execute(
        select(DatasetVersionRow.id).where(
            DatasetVersionRow.name == name, DatasetVersionRow.version == version
        )
    ).scalar_one_or_none()
    if row_id is None:
        known = [v.ref for v in list_versions(session, name)]
        raise DatasetVersionNotFoundError(f"{name}@{version}", known)
    return _load(session, row_id, with_spec=True)


def diff_versions(session: Session, a: tuple[str, str], b: tuple[str, str]) -> VersionDiff:
    """Compare the episodes of two versions, split by split."""
    va, vb = get_version(session, *a), get_version(session, *b)
    left = (
        select(DatasetVersionEpisode.episode_id, DatasetVersionEpisode.split)
        .where(DatasetVersionEpisode.dataset_version_id == va.id)
        .subquery("a")
    )
    right = (
        select(DatasetVersionEpisode.episode_id, DatasetVersionEpisode.split)
        .where(DatasetVersionEpisode.dataset_version_id == vb.id)
        .subquery("b")
    )
    joined = left.join(right, left.c.episode_id == right.c.episode_id, full=True)
    episode = func.coalesce(left.c.episode_id, right.c.episode_id)
    stmt = (
        select(
            left.c.split,
            right.c.split,
            func.count(),
            func.array_agg(episode).filter(episode.is_not(None)),
        )
        .select_from(joined)
        .group_by(left.c.split, right.c.split)
    )
    transitions: dict[tuple[str | None, str | None], int] = {}
    examples: dict[tuple[str | None, str | None], list[int]] = {}
    for split_a, split_b, count, ids in session.execute(stmt):
        transitions[(split_a, split_b)] = int(count)
        examples[(split_a, split_b)] = sorted(ids or [])[:DIFF_EXAMPLES]
    return VersionDiff(a=va.ref, b=vb.ref, transitions=transitions, examples=examples)


def _load(session: Session, row_id: int, *, with_spec: bool = False) -> DatasetVersion:
    row = session.get_one(DatasetVersionRow, row_id)
    manifests = {
        m.format: m
        for m in session.execute(select(Manifest).where(Manifest.dataset_version_id == row_id)).scalars()
    }
    splits: dict[str, int] = {
        split: int(count)
        for split, count in session.execute(
            select(DatasetVersionEpisode.split, func.count())
            .where(DatasetVersionEpisode.dataset_version_id == row_id)
            .group_by(DatasetVersionEpisode.split)
        )
    }
    ipc = manifests.get(ManifestFormat.ARROW_IPC.value)
    parquet = manifests.get(ManifestFormat.PARQUET.value)
    recorded = dict(row.spec)
    near_duplicates = recorded.pop(NEAR_DUPLICATES_KEY, [])
    split_rows = recorded.pop(SPLIT_ROWS_KEY, None)
    split_episodes = {s.value: int(splits.get(s.value, 0)) for s in Split}
    return DatasetVersion(
        id=row.id,
        name=row.name,
        version=row.version,
        spec_hash=row.spec_hash,
        created_at=row.created_at,
        manifest_uri=ipc.uri if ipc else None,
        manifest_sha256=ipc.sha256 if ipc else None,
        parquet_uri=parquet.uri if parquet else None,
        parquet_sha256=parquet.sha256 if parquet else None,
        row_count=ipc.row_count if ipc else sum(splits.values()),
        split_episodes=split_episodes,
        split_rows=None if split_rows is None else {k: int(n) for k, n in split_rows.items()},
        spec=recorded if with_spec else None,
        near_duplicates=list(near_duplicates),
        warnings=split_warnings(recorded, split_episodes),
    )
