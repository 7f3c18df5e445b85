"""Airflow DAGs, one per vendor file in the vendors folder (``SLUICE_VENDORS_DIR``, default dags/vendors).

Adding a vendor is adding a YAML file there; :mod:`sluice_factory` renders it. A broken file is reported by
``vendor_config_check.py`` and never stops the other vendors' DAGs from loading.
"""

from __future__ import annotations

from sluice_factory import vendor_dags

globals().update(vendor_dags())
