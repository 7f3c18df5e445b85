"""Airflow import errors for broken vendor files: this DAG file raises, naming every file and key at fault.

It renders no DAG. Kept apart from ``vendor_dags.py`` because Airflow marks all DAGs of a file with an import
error as stale: a broken vendor file reported there would hide every other vendor's DAG.
"""

from __future__ import annotations

from sluice_factory import check_vendor_files

check_vendor_files()
