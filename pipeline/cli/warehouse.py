"""``sluice warehouse sync``: copy the catalog into the DuckDB warehouse (the group lives with ``dataset``)."""

from pipeline.cli.dataset import warehouse_app as app

__all__ = ["app"]
