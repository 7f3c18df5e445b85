"""``sluice dataset ...`` and ``sluice query`` end to end on a real catalog (typer's runner, real settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from synthetic_catalog import SyntheticCatalog
from typer.testing import CliRunner

from pipeline.cli import dataset, query
from pipeline.warehouse import QueryError

pytestmark = pytest.mark.integration

SPEC = """\
name: demo
filter:
  where: is_accepted AND vendor IN $vendors
  params: {vendors: [acme]}
splits: {group_by: [session_id], seed: 2, val_fraction: 0.25, eval_fraction: 0.25}
"""


@pytest.fixture
def env(migrated_database_url: str, tmp_path: Path) -> dict[str, str]:
    return {"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": migrated_database_url}


def _query_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(query.command)
    return app


def _json(runner: CliRunner, app: typer.Typer, args: list[str], env: dict[str, str]) -> object:
    result = runner.invoke(app, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_build_list_show_diff_and_query(
    catalog: SyntheticCatalog, env: dict[str, str], tmp_path: Path
) -> None:
    with catalog.session() as s:
        for i in range(8):
            catalog.episode(s, vendor="acme", session_id=f"s{i}")
        catalog.episode(s, vendor="bluefield", session_id="b0")
    spec = tmp_path / "demo.yaml"
    spec.write_text(SPEC)
    runner = CliRunner()

    built = _json(runner, dataset.app, ["build", str(spec), "--json"], env)
    assert isinstance(built, dict)
    assert built["ref"] == "demo@v1" and built["created"] and built["row_count"] == 8

    with catalog.session() as s:
        catalog.episode(s, vendor="acme", session_id="s100")
    second = _json(runner, dataset.app, ["build", str(spec), "--json"], env)
    assert isinstance(second, dict) and second["ref"] == "demo@v2"

    listed = _json(runner, dataset.app, ["list", "demo", "--json"], env)
    assert [v["ref"] for v in listed] == ["demo@v1", "demo@v2"]  # type: ignore[union-attr]
    shown = _json(runner, dataset.app, ["show", "demo@v2", "--json"], env)
    assert isinstance(shown, dict) and shown["spec"]["filter"]["params"] == {"vendors": ["acme"]}
    diff = _json(runner, dataset.app, ["diff", "demo@v1", "v2", "--json"], env)
    assert isinstance(diff, dict) and diff["only_in_b"] == 1 and diff["only_in_a"] == 0

    rows = _json(
        runner, _query_app(),
        ["SELECT vendor, count(*) AS n FROM episode_view WHERE vendor = $v GROUP BY vendor", "-p", "v=acme",
         "--json"],
        env,
    )  # fmt: skip
    assert rows == [{"vendor": "acme", "n": 9}]
    table = runner.invoke(_query_app(), ["SELECT episode_id FROM episode_view ORDER BY 1"], env=env)
    assert table.exit_code == 0 and "10 row(s)" in table.stdout

    with pytest.raises(QueryError, match="disabled by configuration"):
        runner.invoke(
            _query_app(), ["SELECT * FROM read_csv('/etc/passwd')"], env=env, catch_exceptions=False
        )
