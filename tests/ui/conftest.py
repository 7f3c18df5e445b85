"""View fixtures (defined in :mod:`view_fixtures`, next to the :mod:`world` they fill the catalog with)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from view_fixtures import fresh_world, role_urls, sources, world, world_db

__all__ = ["fresh_world", "role_urls", "sources", "world", "world_db"]
