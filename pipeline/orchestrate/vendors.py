"""Where the vendor files are: the one rule every entry point (DAG files, CLI, local Airflow) follows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.settings import Settings


def vendors_folder(settings: Settings) -> Path:
    """The folder of vendor files; a relative ``vendors_dir`` is resolved against the project folder."""
    folder = settings.vendors_dir.expanduser()
    return folder if folder.is_absolute() else settings.project_dir_abs / folder
