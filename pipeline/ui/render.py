"""HTML of the Sluice view and the report: Jinja2 templates with autoescaping, plots inlined as SVG.

Pages link to each other with relative URLs only (``run?id=3``, ``lineage?ref=episode:7``), so they work
under whatever prefix Airflow mounts the view at and inside its iframe. The report is the same markup with
links turned off (:func:`render` ``linked=False``): a single file has nowhere to link to.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

PAGES = ("overview", "vendor", "run", "lineage", "error", "report")


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("pipeline.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["dt"] = format_time
    env.filters["size"] = format_size
    env.filters["seconds"] = format_seconds
    env.filters["fact"] = format_fact
    env.filters["svg"] = lambda svg: Markup(svg) if svg else ""  # our own matplotlib output
    return env


def render(page: str, data: dict[str, Any], *, linked: bool = True) -> str:
    """The HTML of ``page`` (one of :data:`PAGES`) for the data its gatherer in :mod:`pipeline.ui.pages` made."""
    if page not in PAGES:
        from pipeline.errors import UnknownChoiceError

        raise UnknownChoiceError("page", page, PAGES)
    return environment().get_template(f"{page}.html").render(**data, linked=linked, page=page)


def format_time(value: datetime | None) -> str:
    if value is None:
        return ""
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S") + " UTC"


def format_fact(value: Any, key: str = "") -> str:
    """A recorded fact for display: times in UTC, sizes in units, floats to 6 significant digits."""
    if isinstance(value, datetime):
        return format_time(value)
    if key.endswith("size_bytes") and isinstance(value, int):
        return f"{format_size(value)} ({value} bytes)"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def format_size(value: int | None) -> str:
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{value} B"


def format_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"
