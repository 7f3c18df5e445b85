"""Report fixtures: the same catalog world as the view's tests (``tests/ui``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ui"))

from view_fixtures import fresh_world, role_urls, sources, world, world_db

__all__ = ["fresh_world", "role_urls", "sources", "world", "world_db"]
