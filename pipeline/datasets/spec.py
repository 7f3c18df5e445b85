"""Dataset specs: which episodes a dataset holds and how they are split, as a validated YAML file.

Example (``dags/datasets/*.yaml`` has more)::

    name: pick_place_accepted
    description: accepted pick-and-place episodes of two vendors, at least 2 s long
    filter:
      where: vendor IN $vendors AND task = $task AND is_accepted AND duration_s >= $min_duration_s
      params: {vendors: [acme, bluefield], task: pick_place, min_duration_s: 2.0}
    near_duplicates: keep_one   # the default; keep_all keeps every member of a near-duplicate group
    sample: {seed: 7, fraction: 0.5}
    limits: {max_episodes: 100000, max_episodes_per_group: 200}
    splits: {group_by: [session_id, robot_id], seed: 11, val_fraction: 0.05, eval_fraction: 0.05}

``filter.where`` is one SQL boolean expression over the warehouse's ``episode_view`` (subqueries on the other
views are fine). Values never go into its text: it names them as ``$param`` and ``filter.params`` gives them,
bound by DuckDB at run time, so ``x'; DROP TABLE episodes; --`` is only ever a string. The expression is
parsed when the spec loads: one expression, no second statement, and it must use exactly the parameters the
spec gives. What the SQL can reach is further limited by the warehouse sandbox (read-only, no files).

Semantics of sampling, limits and splits are in :mod:`pipeline.datasets.select`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator

from pipeline.config.hashing import canonical_json
from pipeline.config.loader import read_config_text
from pipeline.config.messages import validation_problems
from pipeline.config.types import FrozenModel, Lax, Loc, Slug, format_loc, raise_problems
from pipeline.config.yamlsafe import YamlRefused, parse_strict_yaml
from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

#: Bumped when the meaning of a spec changes without its text changing, so that every spec hash changes.
SPEC_FORMAT_VERSION = 1
#: Largest spec file accepted; a spec is a few hundred bytes.
MAX_SPEC_BYTES = 64 * 1024
#: Longest ``filter.where`` accepted.
MAX_WHERE_CHARS = 8_192

#: Columns of ``episode_view`` a split may group on. Episodes sharing a value in *any* listed column land in
#: the same split (and duplicates always go with their original).
GroupColumn = Literal["session_id", "robot_id", "task", "vendor", "content_fingerprint"]

_PARAM_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")

Scalar = StrictBool | StrictInt | StrictFloat | StrictStr
ParamValue = Scalar | Annotated[tuple[Scalar, ...], Lax]


def _check_param_name(value: str) -> str:
    from pipeline.config.types import config_error

    if not _PARAM_NAME.fullmatch(value):
        raise config_error(
            "param_name",
            f"parameter name {value!r} is not allowed: use 1-63 lowercase letters, digits and underscores, "
            "starting with a letter",
        )
    return value


class FilterSpec(FrozenModel):
    """Which episodes of ``episode_view`` a dataset may hold."""

    where: str = Field(default="is_accepted", min_length=1, max_length=MAX_WHERE_CHARS)
    params: dict[str, ParamValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_sql(self) -> FilterSpec:
        problems: list[tuple[Loc, str]] = []
        for name in self.params:
            try:
                _check_param_name(name)
            except ValueError as exc:
                problems.append((("params", name), str(exc)))
        problems += where_problems(self.where, set(self.params))
        raise_problems(problems)
        return self

    def bound_params(self) -> dict[str, Any]:
        """The parameters as DuckDB binds them (lists for tuples)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}


def where_problems(where: str, given: set[str]) -> list[tuple[Loc, str]]:
    """Problems of a filter expression: not one SQL expression, or parameters used and given differ."""
    import duckdb

    try:
        duckdb.SQLExpression(where)
    except duckdb.Error as exc:
        detail = str(exc).strip().splitlines()[0]
        return [(("where",), f"not one SQL expression: {detail}")]
    try:
        (statement,) = duckdb.extract_statements(select_sql(where))
    except (duckdb.Error, ValueError) as exc:
        return [(("where",), f"not a usable filter: {str(exc).strip().splitlines()[0]}")]
    used = set(statement.named_parameters)
    problems: list[tuple[Loc, str]] = []
    if used - given:
        problems.append(
            (("params",), f"the filter uses ${', $'.join(sorted(used - given))} but params lacks them")
        )
    if given - used:
        problems.append(
            (("params",), f"params gives {', '.join(sorted(given - used))}, which the filter never uses")
        )
    if any(name.startswith("_") for name in used):
        problems.append((("where",), "parameters starting with '_' are reserved for the builder"))
    return problems


def select_sql(where: str, columns: str = "1", relation: str = "episode_view") -> str:
    """``SELECT columns FROM relation WHERE (where)``. ``where`` is a spec's filter that
    :func:`where_problems` accepted as one expression: wrapped in parentheses on lines of its own (so a
    trailing comment cannot swallow the closing one), it cannot reach outside its WHERE clause."""
    return f"SELECT {columns} FROM {relation} WHERE (\n{where}\n)"


class SampleSpec(FrozenModel):
    """Keep each matching episode with probability ``fraction``, decided by a hash of (seed, episode id)."""

    seed: int = 0
    fraction: float = Field(default=1.0, gt=0.0, le=1.0)


class LimitsSpec(FrozenModel):
    """Caps applied after splitting, in sample order (frozen evaluation episodes are always kept)."""

    max_episodes: int | None = Field(default=None, ge=1)
    max_episodes_per_group: int | None = Field(default=None, ge=1)
    max_total_duration_s: float | None = Field(default=None, gt=0.0)


class SplitSpec(FrozenModel):
    """Train / val / eval by group: a hash of (seed, group) decides each group's split."""

    group_by: Annotated[tuple[GroupColumn, ...], Lax] = Field(default=("session_id",), min_length=1)
    seed: int = 0
    val_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)
    eval_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)

    @model_validator(mode="after")
    def _check(self) -> SplitSpec:
        problems: list[tuple[Loc, str]] = []
        if self.val_fraction + self.eval_fraction >= 1.0:
            problems.append(
                (
                    ("val_fraction",),
                    f"val_fraction + eval_fraction = {self.val_fraction + self.eval_fraction:g}; "
                    "it must stay below 1 so that some groups train",
                )
            )
        if len(set(self.group_by)) != len(self.group_by):
            problems.append((("group_by",), f"{list(self.group_by)} names a column twice"))
        raise_problems(problems)
        return self


#: What a build does with near-duplicate groups (``dedup_group`` of ``episode_view``): ``keep_one`` keeps one
#: episode per group (see :mod:`pipeline.datasets.select`), ``keep_all`` keeps every member the filter matched.
NearDuplicates = Literal["keep_one", "keep_all"]


class DatasetSpec(FrozenModel):
    """A dataset: its name, the filter, near-duplicate handling, sampling, limits and split rules."""

    name: Slug
    description: str = ""
    filter: FilterSpec = Field(default_factory=FilterSpec)
    near_duplicates: NearDuplicates = "keep_one"
    sample: SampleSpec = Field(default_factory=SampleSpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    splits: SplitSpec = Field(default_factory=SplitSpec)


def spec_hash(spec: DatasetSpec) -> str:
    """sha256 (hex) of the spec's canonical JSON, defaults included: equal specs hash equal."""
    payload = {"format": SPEC_FORMAT_VERSION, "spec": spec.model_dump(mode="json")}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def load_spec(path: Path | str, *, max_bytes: int = MAX_SPEC_BYTES) -> DatasetSpec:
    """Load and validate a dataset spec file (its ``name`` must equal the file's stem).

    Raises :class:`~pipeline.errors.ConfigError` listing every problem with its key path and line.
    """
    path = Path(path)
    source = str(path)
    text = read_config_text(path, max_bytes=max_bytes)
    try:
        tree = parse_strict_yaml(text)
    except YamlRefused as exc:
        where = f"line {exc.line}: {exc.message}" if exc.line else exc.message
        raise ConfigError(source, [(format_loc(exc.loc), where)]) from None
    if not isinstance(tree.data, dict):
        raise ConfigError(source, [("", "a dataset spec is a mapping of keys")])
    problems: list[tuple[Loc, str]] = list(tree.problems)
    name = tree.data.get("name")
    if isinstance(name, str) and name != path.stem:
        problems.append((("name",), f"name {name!r} must equal the file name's stem {path.stem!r}"))
    spec: DatasetSpec | None = None
    try:
        spec = DatasetSpec.model_validate(tree.data)
    except ValidationError as exc:
        flagged = [loc for loc, _ in tree.problems]
        for loc, message in validation_problems(exc, DatasetSpec, tree):
            if not any(loc[: len(bad)] == bad for bad in flagged):
                problems.append((loc, message))
    if problems:
        ordered = sorted(problems, key=lambda p: tree.line_of(p[0]) or 0)
        raise ConfigError(
            source,
            [
                (format_loc(loc), f"line {tree.line_of(loc)}: {msg}" if tree.line_of(loc) else msg)
                for loc, msg in ordered
            ],
        )
    assert spec is not None
    log.debug("loaded dataset spec %s from %s", spec.name, source)
    return spec
