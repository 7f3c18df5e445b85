"""Load vendor configuration files safely: a hostile file is refused with every problem and its key path.

Defences, in order: the file must be a regular file under :data:`MAX_CONFIG_BYTES` (checked before reading,
and the read itself is capped); it must be UTF-8; the YAML is read by :mod:`pipeline.config.yamlsafe`
(no tags, anchors or aliases, no YAML 1.1 guessing); the data is validated by the strict, frozen
:class:`~pipeline.config.models.VendorConfig`; the vendor's name must equal the file's stem; and every path
the config names is confined to the vendor root (``..``, absolute paths outside it and symlinks that lead
out are refused).

**The vendor root** is the source folder. A relative local ``source.url`` (``.sluice/drops/acme_robotics``) is
resolved against ``base_dir``, the project root, which defaults to the working directory: the same rule as
``SLUICE_HOME``'s default ``.sluice``, so the demo's drops and its Sluice home live side by side. Callers
that run elsewhere (an Airflow worker) pass ``base_dir`` explicitly. ``vendor_root`` overrides the folder
paths are confined to. For a remote source (``s3://...``) paths are checked lexically only.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
from pydantic import ValidationError

from pipeline.config.messages import validation_problems
from pipeline.config.models import AD_HOC_PREFIX, VendorConfig, local_source_path
from pipeline.config.types import Loc, format_loc
from pipeline.config.yamlsafe import YamlRefused, YamlTree, parse_strict_yaml
from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

#: Largest vendor file accepted. A vendor with fifty cameras is under 50 KiB; the cap bounds what a hostile
#: file can make the parser do.
MAX_CONFIG_BYTES = 256 * 1024

#: File suffixes :func:`load_vendors` picks up.
VENDOR_SUFFIXES = (".yaml", ".yml")


def read_config_text(path: Path, *, max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """Read a config file as UTF-8 text, refusing non-regular and oversize files before reading them."""
    source = str(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(source, [("", "not a regular file")])
        if info.st_size > max_bytes:
            raise ConfigError(
                source, [("", f"the file is {info.st_size} bytes; the limit is {max_bytes} bytes")]
            )
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise ConfigError(source, [("", f"cannot read the file: {exc.strerror or exc}")]) from None
    if len(raw) > max_bytes:
        raise ConfigError(source, [("", f"the file is over the limit of {max_bytes} bytes")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [("", f"not UTF-8 text (invalid byte at offset {exc.start})")]) from None


def load_vendor(
    path: Path,
    *,
    vendor_root: Path | None = None,
    base_dir: Path | None = None,
    max_bytes: int = MAX_CONFIG_BYTES,
) -> VendorConfig:
    """Load and validate one vendor file.

    ``vendor_root`` is the folder the config's paths must stay inside (default: the local source folder,
    resolved against ``base_dir``, default the working directory). Raises :class:`pipeline.errors.ConfigError`
    listing every problem with its key path (``steps.transcode.resources.cpus``) and line.
    """
    path = Path(path)
    source = str(path)
    text = read_config_text(path, max_bytes=max_bytes)
    try:
        tree = parse_strict_yaml(text)
    except YamlRefused as exc:
        raise ConfigError(source, [(format_loc(exc.loc), _with_line(exc.line, exc.message))]) from None
    if not isinstance(tree.data, dict):
        kind = "list" if isinstance(tree.data, list) else "single value"
        raise ConfigError(source, [("", f"the document is a {kind}; a vendor config is a mapping of keys")])

    problems: list[tuple[Loc, str]] = list(tree.problems)
    flagged = [loc for loc, _ in tree.problems]
    name = tree.data.get("name")
    if isinstance(name, str) and name != path.stem:
        problems.append((("name",), f"name {name!r} must equal the file name's stem {path.stem!r}"))
    if isinstance(name, str) and name.startswith(AD_HOC_PREFIX):
        # the catalog tells ad-hoc ingests' vendors by this prefix (their files claim no configured
        # vendor's as duplicates: pipeline.catalog.sources.claim_original)
        problems.append((("name",), f"name {name!r}: {AD_HOC_PREFIX!r} names the vendors of ad-hoc ingests"))
    config: VendorConfig | None = None
    try:
        config = VendorConfig.model_validate(tree.data)
    except ValidationError as exc:
        for loc, message in validation_problems(exc, VendorConfig, tree):
            # A scalar the YAML reader already refused (ambiguous, tagged) is reported once, by the reader.
            if not any(loc[: len(bad)] == bad for bad in flagged):
                problems.append((loc, message))
    reported = {loc for loc, _ in problems}
    problems += [
        (loc, message)
        for loc, message in confinement_problems(tree.data, vendor_root=vendor_root, base_dir=base_dir)
        if loc not in reported
    ]
    if problems:
        raise ConfigError(source, _format(problems, tree))
    log.debug("loaded vendor %s from %s", config.name if config else "?", source)
    assert config is not None
    return config


def load_vendors(folder: Path, *, base_dir: Path | None = None) -> dict[str, VendorConfig | ConfigError]:
    """Load every ``*.yaml``/``*.yml`` file of ``folder`` (not recursive, hidden files skipped).

    Keys are file stems (which a valid config's ``name`` equals). A broken file maps to its
    :class:`ConfigError` and never stops the others from loading; two files with one stem are both errors.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(str(folder), [("", "no such folder of vendor files")])
    files = sorted(p for p in folder.iterdir() if p.suffix in VENDOR_SUFFIXES and not p.name.startswith("."))
    by_stem: dict[str, list[Path]] = {}
    for file in files:
        by_stem.setdefault(file.stem, []).append(file)
    result: dict[str, VendorConfig | ConfigError] = {}
    for stem, paths in by_stem.items():
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            result[stem] = ConfigError(
                str(paths[0]), [("name", f"vendor {stem!r} is defined by several files: {names}")]
            )
            continue
        try:
            result[stem] = load_vendor(paths[0], base_dir=base_dir)
        except ConfigError as exc:
            log.warning("vendor file %s is invalid:\n%s", paths[0], exc)
            result[stem] = exc
    return result


def confinement_problems(
    data: dict[str, Any] | VendorConfig, *, vendor_root: Path | None = None, base_dir: Path | None = None
) -> list[tuple[Loc, str]]:
    """Paths a config names that escape the vendor root (symlinks resolved for a local root).

    Works on raw data too (a config that failed validation elsewhere), so that every problem is reported
    at once; values that are not strings are left to validation.
    """
    if isinstance(data, VendorConfig):
        data = data.model_dump(mode="json")
    source = data.get("source")
    url = source.get("url") if isinstance(source, dict) else None
    calibration = data.get("calibration")
    sidecar = calibration.get("sidecar_path") if isinstance(calibration, dict) else None
    checks: list[tuple[Loc, str]] = []
    if isinstance(sidecar, str) and sidecar:
        checks.append((("calibration", "sidecar_path"), sidecar))
    root: Path | None = None
    if vendor_root is not None:
        root = Path(vendor_root)
    elif isinstance(url, str) and url:
        protocol, _ = fsspec.core.split_protocol(url)
        if protocol in (None, "file", "local"):
            root = local_source_path(url, base_dir)
    problems: list[tuple[Loc, str]] = []
    for loc, text in checks:
        pure = PurePosixPath(text)
        if ".." in pure.parts:
            problems.append((loc, f"{text!r} contains '..': paths must stay inside the vendor root"))
            continue
        if root is None:
            if pure.is_absolute():
                problems.append(
                    (loc, f"{text!r} is absolute, but the source is remote: write it relative to it")
                )
            continue
        candidate = Path(text) if pure.is_absolute() else root / text
        try:
            resolved = candidate.resolve()
            root_resolved = root.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            problems.append((loc, f"{text!r} cannot be resolved: {exc}"))
            continue
        if not resolved.is_relative_to(root_resolved):
            problems.append(
                (loc, f"{text!r} resolves to {resolved}, outside the vendor root {root_resolved}")
            )
    return problems


def _with_line(line: int | None, message: str) -> str:
    return f"line {line}: {message}" if line else message


def _format(problems: list[tuple[Loc, str]], tree: YamlTree) -> list[tuple[str, str]]:
    # In file order, so that the list reads top to bottom beside the file.
    ordered = sorted(problems, key=lambda problem: tree.line_of(problem[0]) or 0)
    return [(format_loc(loc), _with_line(tree.line_of(loc), message)) for loc, message in ordered]
