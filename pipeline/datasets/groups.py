"""Split groups: episodes that must share a split because they share a session, robot, ... or content.

Given the chosen columns (``splits.group_by``), two episodes are in one group when they share a value in any
of those columns, directly or through a chain of other episodes (connected components), and a duplicate is
always in its original's group. So with ``group_by: [session_id, robot_id]`` a robot's sessions stay
together, and a session that moved between robots joins both robots' episodes into one group: nothing that
shares a key can leak across splits.

A group is named by its *preferred key*: the smallest value of the first listed column found in it
(``session_id=s-0042``), else of the next column, else ``original=<episode id>``. The name, not the member
list, feeds the split hash, so a group keeps its split when later versions add episodes to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Name of the implicit last grouping column: an episode's original (itself unless it is a duplicate).
ORIGINAL = "original"


def group_keys(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The preferred key of each row's group (see the module doc), as a string array aligned with ``table``.

    ``table`` needs ``episode_id``, ``duplicate_of_id`` and every column of ``columns``.
    """
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.string())
    episode_id = table.column("episode_id")
    original = pc.coalesce(table.column("duplicate_of_id").cast(episode_id.type), episode_id)
    by_rank = [(name, table.column(name)) for name in columns] + [(ORIGINAL, original)]

    # Value nodes, numbered in preference order: by column rank, then by value.
    node_names: list[pa.Array] = []
    node_columns = np.full((n, len(by_rank)), -1, dtype=np.int64)
    offset = 0
    for rank, (name, values) in enumerate(by_rank):
        text = pc.cast(values, pa.string()).combine_chunks()
        encoded = text.dictionary_encode()
        order = pc.array_sort_indices(encoded.dictionary).to_numpy()
        position = np.empty_like(order)
        position[order] = np.arange(order.size)  # dictionary index -> sorted position
        indices = encoded.indices
        present = pc.is_valid(indices).to_numpy(zero_copy_only=False)
        codes = pc.fill_null(indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        node_columns[present, rank] = position[codes[present]] + offset
        sorted_values = pc.take(encoded.dictionary, pa.array(order))
        node_names.append(pc.binary_join_element_wise(name, sorted_values, "="))
        offset += order.size

    label = _components(node_columns, offset)
    names = pa.concat_arrays([a.cast(pa.string()) for a in node_names])
    # Every row has its ORIGINAL node, so the last column is never -1.
    return pc.take(names, pa.array(label[node_columns[:, -1]]))


def _components(edges: np.ndarray, n_nodes: int) -> np.ndarray:
    """For each value node, the smallest node id of its connected component.

    ``edges[i]`` lists the value nodes of row i (-1 for none); a row links all of its nodes. Min-label
    propagation with pointer jumping: a handful of rounds for real data (sessions within robots).
    """
    label = np.arange(n_nodes, dtype=np.int64)
    present = edges >= 0
    safe = np.where(present, edges, 0)
    while True:
        row_min = np.where(present, label[safe], np.iinfo(np.int64).max).min(axis=1)
        updated = label.copy()
        np.minimum.at(updated, safe[present], np.broadcast_to(row_min[:, None], edges.shape)[present])
        while True:  # pointer jumping: follow labels to their own labels until stable
            jumped = updated[updated]
            if np.array_equal(jumped, updated):
                break
            updated = jumped
        if np.array_equal(updated, label):
            return label
        label = updated
