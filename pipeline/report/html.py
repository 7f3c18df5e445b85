"""``sluice report RUN``: one self-contained HTML file about one pipeline run.

Besides the run's page of the Sluice view (outcome, toggles, failures, quarantines, quality over time) it
shows what :mod:`pipeline.report.quality` gathers: histograms against the vendor's thresholds, a contact
sheet of frames, what each annotate cascade stage cost and removed (:mod:`pipeline.report.cascade`),
dataset statistics and how to open each episode in a viewer.

The file holds everything it shows: styles inline, plots as inline SVG (rasters as ``data:`` URIs), no script,
no font, image or stylesheet from anywhere else, so it opens offline and can be attached to a ticket.
:func:`remote_references` is the check; :func:`render_report` refuses to return a page that fails it.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from pipeline.catalog import views
from pipeline.errors import SluiceError
from pipeline.ui.pages import ViewSources, run_page
from pipeline.ui.render import render

log = logging.getLogger(__name__)

#: Attributes through which a page loads or links something.
URL_ATTRIBUTES = frozenset({"src", "href", "xlink:href", "srcset", "action", "poster", "data"})
_REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)
_CSS_URL = re.compile(r"url\(\s*['\"]?\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)
_XMLNS = re.compile(r'\sxmlns(?::xlink)?="http://www\.w3\.org/[^"]*"')


class ReportError(SluiceError):
    """The report cannot be made for the run asked for."""


def resolve_run(sources: ViewSources, ref: str) -> views.RunSummary:
    """The one run ``ref`` names (id, Airflow run_id, ``dag_id/run_id`` or ``latest``)."""
    with sources.session() as session:
        found = views.find_runs(session, ref)
        if len(found) == 1:
            return found[0]
        if not found:
            recent = [f"{r.id} ({r.dag_id}/{r.run_id})" for r in views.latest_runs(session, limit=5)]
            raise ReportError(
                f"no pipeline run {ref!r}; give a run id, an Airflow run_id, dag_id/run_id or 'latest'"
                + (f"; latest runs: {', '.join(recent)}" if recent else "; no runs are recorded yet")
            )
    names = ", ".join(f"{r.dag_id}/{r.run_id}" for r in found)
    raise ReportError(f"{ref!r} names {len(found)} runs ({names}); give dag_id/run_id or the run id")


def bench_section(path: Path) -> dict[str, Any]:
    """A benchmark's JSON (``sluice bench NAME --json FILE``): its top-level numbers as a table, its
    top-level lists of numbers as line plots."""
    from pipeline.report.plots import line_svg

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read benchmark results {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ReportError(f"benchmark results {path} hold a {type(data).__name__}; expected a JSON object")
    figures = {
        k: v
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    series = {
        k: v
        for k, v in data.items()
        if isinstance(v, list)
        and len(v) >= 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
    }
    return {
        "name": str(data.get("bench") or data.get("name") or path.stem),
        "figures": figures,
        "plots": [line_svg(k, [float(x) for x in values]) for k, values in sorted(series.items())],
    }


def render_report(sources: ViewSources, ref: str, *, bench_files: Sequence[Path] = ()) -> str:
    """The report's HTML for the run ``ref`` names."""
    from pipeline.report import cascade, quality, sheet
    from pipeline.version import code_version

    run = resolve_run(sources, ref)
    data = run_page(sources, run.id)
    episodes = data["episode_ids"]
    with sources.session() as session:
        thresholds = quality.vendor_thresholds(session, run.vendor, run.config_hash)
        frames = sheet.contact_sheet(session, episodes, storage_options=sources.storage_options)
        hours = quality.hours(session)
        ranges = quality.value_ranges(session, episodes, storage_options=sources.storage_options)
        stages = cascade.stage_costs(session, episodes)
    data.update(
        generated_at=datetime.now(UTC),
        code_version=code_version(),
        bench=[bench_section(Path(p)) for p in bench_files],
        histograms=quality.histograms(data["series"], episodes, thresholds),
        thresholds=thresholds,
        sheet=frames,
        hours=hours,
        ranges=ranges,
        cascade=stages,
    )
    html = _XMLNS.sub("", render("report", data, linked=False))
    remote = remote_references(html)
    if remote:
        raise ReportError(f"the report would load {len(remote)} remote resource(s): {remote[:3]}")
    return html


def write_report(sources: ViewSources, ref: str, out: Path, *, bench_files: Sequence[Path] = ()) -> Path:
    """Write the report of run ``ref`` to ``out`` (staged, then renamed into place); returns the path. A path
    that cannot take the file is a :class:`ReportError` saying why, before the plots are drawn."""
    from pipeline.paths import file_refusal

    out = out.expanduser().absolute()
    why_not = file_refusal(out)
    if why_not is not None:
        raise ReportError(f"cannot write the report to {out}: {why_not}")
    html = render_report(sources, ref, bench_files=bench_files)
    staging = out.with_name(f".{out.name}.tmp")
    staging.write_text(html, encoding="utf-8")
    staging.replace(out)
    log.info("wrote report of run %s to %s (%d bytes)", ref, out, len(html.encode()))
    return out


class _UrlCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str, str]] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        for name, value in attrs:
            if value is None:
                continue
            if name in URL_ATTRIBUTES and _REMOTE.match(value):
                self.urls.append((tag, name, value))
            if name == "style" and _CSS_URL.search(value):
                self.urls.append((tag, name, value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style and (_CSS_URL.search(data) or "@import" in data):
            self.urls.append(("style", "css", data.strip()[:80]))


def remote_references(html: str) -> list[tuple[str, str, str]]:
    """Every (tag, attribute, value) through which ``html`` would load or link another host.

    A URL with a scheme and host (``https://…``) or scheme-relative (``//…``) counts; ``data:``, fragment
    and relative links do not. CSS ``url(//…)`` and ``@import`` count too.
    """
    collector = _UrlCollector()
    collector.feed(html)
    collector.close()
    return collector.urls
