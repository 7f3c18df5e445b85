"""Architecture rules kept as tests, not wishes (STYLE.md, "Our shape")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = {"av", "ray", "ortools", "duckdb", "numpy", "pyarrow", "great_expectations", "torch"}


def _imports(tree: ast.AST, *, top_level_only: bool) -> list[tuple[int, str]]:
    nodes = tree.body if top_level_only and isinstance(tree, ast.Module) else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_pipeline_never_imports_airflow() -> None:
    offenders = []
    for path in (REPO / "pipeline").rglob("*.py"):
        for line, module in _imports(ast.parse(path.read_text()), top_level_only=False):
            if module.split(".")[0] == "airflow":
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert offenders == []


def test_dags_and_plugins_keep_heavy_imports_inside_task_bodies() -> None:
    offenders = []
    for folder in ("dags", "plugins"):
        for path in (REPO / folder).rglob("*.py"):
            for line, module in _imports(ast.parse(path.read_text()), top_level_only=True):
                if module.split(".")[0] in HEAVY:
                    offenders.append(f"{path.relative_to(REPO)}:{line} imports {module} at module level")
    assert offenders == []


def test_cli_starts_without_heavy_libraries() -> None:
    """`sluice --help` must stay fast: command groups import heavy libraries inside their commands."""
    code = (
        "import sys, pipeline.cli; heavy = sorted(m for m in "
        f"{sorted(HEAVY | {'airflow'})!r} if m in sys.modules); print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""
