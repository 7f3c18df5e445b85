"""Dataset spec files: the examples load, and bad or hostile specs are refused with their key paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.datasets import DatasetSpec, load_spec, spec_hash
from pipeline.errors import ConfigError

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "dags" / "datasets").glob("*.yaml"))

GOOD = """\
name: {name}
filter:
  where: vendor = $vendor AND duration_s >= $min_s
  params: {{vendor: acme, min_s: 2.0}}
splits: {{group_by: [session_id, robot_id], val_fraction: 0.1, eval_fraction: 0.1}}
"""


def _write(tmp_path: Path, text: str, name: str = "demo") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_specs_load(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 2


def test_a_good_spec_loads_and_hashes_canonically(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD.format(name="demo")))
    assert spec.filter.bound_params() == {"vendor": "acme", "min_s": 2.0}
    assert spec.splits.group_by == ("session_id", "robot_id")
    reordered = DatasetSpec.model_validate(
        {
            "splits": {"eval_fraction": 0.1, "val_fraction": 0.1, "group_by": ["session_id", "robot_id"]},
            "filter": {"params": {"min_s": 2.0, "vendor": "acme"}, "where": spec.filter.where},
            "name": "demo",
        }
    )
    assert spec_hash(reordered) == spec_hash(spec)
    assert spec_hash(spec.model_copy(update={"name": "other"})) != spec_hash(spec)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (GOOD.format(name="other"), "name", "must equal the file name"),
        (GOOD.format(name="demo") + "owner: me\n", "owner", "unknown key 'owner'; allowed: name"),
        (
            "name: demo\nfilter: {where: \"vendor = 'a'; DROP TABLE episodes\"}\n",
            "filter.where",
            "more than one statement",
        ),
        ("name: demo\nfilter: {where: '1=1) UNION SELECT 1 --'}\n", "filter.where", "not one SQL expression"),
        ("name: demo\nfilter: {where: vendor = $vendor}\n", "filter.params", "params lacks them"),
        ("name: demo\nfilter: {where: 'true', params: {vendor: acme}}\n", "filter.params", "never uses"),
        ("name: demo\nfilter: {where: vendor = $_x, params: {_x: 1}}\n", "filter.params._x", "not allowed"),
        ("name: demo\nsplits: {val_fraction: 0.5, eval_fraction: 0.5}\n", "splits.val_fraction", "below 1"),
        ("name: demo\nsplits: {group_by: [route]}\n", "splits.group_by[0]", "session_id"),
        ("name: demo\nsample: {fraction: 0}\n", "sample.fraction", "greater than 0"),
        ("name: demo\nfilter: {where: x = $v, params: {v: yes}}\n", "filter.params.v", "ambiguous"),
        ("name: demo\nlimits: &a {max_episodes: 3}\n", "", "anchors are not allowed"),
        ("", "", "the file is empty: a config file is a mapping"),  # not "a vendor config"
        ("- demo\n", "", "a dataset spec is a mapping of keys"),
    ],
)
def test_bad_specs_are_refused_with_their_key_path(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_spec(_write(tmp_path, text))
    assert any(path == where and message in problem for path, problem in caught.value.problems), caught.value


def test_an_oversized_spec_is_refused_before_parsing(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: demo\ndescription: '" + "x" * 70_000 + "'\n")
    with pytest.raises(ConfigError, match="limit"):
        load_spec(path)
