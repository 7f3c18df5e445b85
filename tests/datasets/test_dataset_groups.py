"""Split groups: connected components over the chosen columns, duplicates with their originals."""

from __future__ import annotations

import pyarrow as pa

from pipeline.datasets.groups import group_keys


def _table(**columns: list[object]) -> pa.Table:
    return pa.table(columns)


def test_one_column_groups_by_its_value_and_duplicates_follow_their_original() -> None:
    table = _table(
        episode_id=[1, 2, 3, 4, 5],
        duplicate_of_id=[None, None, None, None, 1],
        session_id=["b", "b", "a", None, None],
    )
    assert group_keys(table, ["session_id"]).to_pylist() == [
        "session_id=b",
        "session_id=b",
        "session_id=a",
        "original=4",  # no session: its own group
        "session_id=b",  # a duplicate of episode 1
    ]


def test_several_columns_join_everything_that_shares_any_value() -> None:
    table = _table(
        episode_id=[1, 2, 3, 4, 5, 6],
        duplicate_of_id=[None] * 6,
        session_id=["s1", "s2", "s3", "s4", None, "s1"],
        robot_id=["r1", "r1", "r2", None, "r2", "r9"],
    )
    keys = group_keys(table, ["session_id", "robot_id"]).to_pylist()
    # r1 links s1 and s2; s1 links r9 (episode 6); r2 links s3 and episode 5; s4 is alone
    assert keys == [
        "session_id=s1",
        "session_id=s1",
        "session_id=s3",
        "session_id=s4",
        "session_id=s3",
        "session_id=s1",
    ]


def test_long_chains_converge() -> None:
    n = 2_000
    # episode i shares its session with i-1 and its robot with i+1: one chain through all of them
    table = _table(
        episode_id=list(range(n)),
        duplicate_of_id=[None] * n,
        session_id=[f"s{i // 2:05d}" for i in range(n)],
        robot_id=[f"r{(i + 1) // 2:05d}" for i in range(n)],
    )
    assert set(group_keys(table, ["session_id", "robot_id"]).to_pylist()) == {"session_id=s00000"}


def test_empty_table() -> None:
    table = _table(episode_id=pa.array([], pa.int64()), duplicate_of_id=pa.array([], pa.int64()),
                   session_id=pa.array([], pa.string()))  # fmt: skip
    assert group_keys(table, ["session_id"]).to_pylist() == []
