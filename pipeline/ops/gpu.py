"""GPU checks from ``nvidia-smi`` output: inventory (count and model) and ECC health.

Inventory reads ``nvidia-smi --query-gpu=... --format=csv,nounits`` (one row per GPU the driver sees); ECC
reads ``nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER``. ECC is gated on the *volatile* counters, which
reset when the driver reloads (at boot), never on the *aggregate* ones: those are lifetime totals kept in
the GPU's InfoROM, some GPUs cannot clear them, and gating on them would condemn a repaired or healthy
node forever. Aggregate counts are still reported in the reason, for the record.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pipeline.ops.config import PreflightConfig
from pipeline.ops.model import CheckResult, CommandOutput, CommandOutputError

#: The ``--query-gpu`` fields the runner asks for; the parser maps columns by the header, not by position.
GPU_QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "serial")

_NOT_AVAILABLE = {"N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}


@dataclass(frozen=True)
class GpuInfo:
    """One row of the inventory query."""

    index: int
    name: str
    uuid: str
    bus_id: str


@dataclass(frozen=True)
class GpuEcc:
    """The ECC state of one GPU from ``nvidia-smi -q``; ``None`` where the GPU reports N/A."""

    bus_id: str
    ecc_mode: str | None = None
    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None
    pending_retirement: bool = False
    pending_remap: bool = False
    remap_failure: bool = False
    extra: dict[str, str] = field(default_factory=dict, compare=False)


def parse_gpu_query_csv(text: str, command: str = "nvidia-smi --query-gpu") -> list[GpuInfo]:
    """Parse ``--format=csv`` output (with its header). Lines that are not CSV rows are refused loudly.

    nvidia-smi prints an error line such as ``Unable to determine the device handle for GPU0000:9B:00.0:
    Unknown Error`` among the rows when a GPU has fallen off the bus; that GPU is missing from the
    inventory, and the line is reported by :func:`unreadable_gpu_lines`.
    """
    lines = [line for line in text.splitlines() if line.strip() and not _is_nvsmi_error(line)]
    if not lines:
        return []
    header = [_column(name) for name in next(csv.reader([lines[0]], skipinitialspace=True))]
    missing = [name for name in ("index", "name") if name not in header]
    if missing:
        raise CommandOutputError(command, f"the CSV header lacks {', '.join(missing)}", lines[0])
    gpus = []
    for row in csv.reader(io.StringIO("\n".join(lines[1:])), skipinitialspace=True):
        if len(row) != len(header):
            raise CommandOutputError(
                command, f"a row has {len(row)} fields, the header {len(header)}", ",".join(row)
            )
        values = dict(zip(header, (cell.strip() for cell in row), strict=True))
        try:
            index = int(values["index"])
        except ValueError:
            raise CommandOutputError(command, "a GPU index is not a number", values["index"]) from None
        gpus.append(
            GpuInfo(
                index=index,
                name=values["name"],
                uuid=values.get("uuid", ""),
                bus_id=values.get("pci.bus_id", ""),
            )
        )
    return gpus


def unreadable_gpu_lines(text: str) -> list[str]:
    """nvidia-smi's own error lines in its output (a GPU it can see on the bus but cannot talk to)."""
    return [line.strip() for line in text.splitlines() if _is_nvsmi_error(line)]


def _is_nvsmi_error(line: str) -> bool:
    return line.strip().startswith(
        ("Unable to determine", "Unknown Error", "GPU is lost", "No devices were found")
    )


def _column(name: str) -> str:
    # "memory.total [MiB]" -> "memory.total": units stay in the header even with nounits.
    return re.sub(r"\s*\[.*\]$", "", name.strip())


# --- nvidia-smi -q -------------------------------------------------------------------------------------------


def parse_nvidia_smi_q(text: str) -> list[GpuEcc]:
    """The ECC state of every GPU section (``GPU 00000000:18:00.0``) of ``nvidia-smi -q`` output.

    Handles both counter layouts: per-memory counters (``DRAM Correctable``, ``SRAM Uncorrectable
    SEC-DED``, drivers of the A100/H100 era) and the older ``Single Bit`` / ``Double Bit`` groups, where
    only their ``Total`` line is counted so that the per-unit lines are not added twice.
    """
    gpus: list[GpuEcc] = []
    for bus_id, leaves in _gpu_sections(text):
        counts = {"volatile": [0, 0], "aggregate": [0, 0]}
        seen = {"volatile": [False, False], "aggregate": [False, False]}
        ecc_mode = None
        pending_retirement = pending_remap = remap_failure = False
        for path, value in leaves:
            top = path[0].upper()  # Volta-era drivers print "Ecc Mode"
            if top == "ECC MODE" and path[-1] == "Current":
                ecc_mode = None if value in _NOT_AVAILABLE else value
            elif top == "ECC ERRORS" and len(path) >= 3 and path[1] in ("Volatile", "Aggregate"):
                kind = _ecc_kind(path[2:])
                number = _count(value)
                if kind is None or number is None:
                    continue
                scope = path[1].lower()
                counts[scope][kind] += number
                seen[scope][kind] = True
            elif top == "RETIRED PAGES" and path[-1].startswith("Pending"):
                pending_retirement |= value == "Yes"
            elif top == "REMAPPED ROWS" and path[-1] == "Pending":
                pending_remap |= value == "Yes"
            elif top == "REMAPPED ROWS" and path[-1] == "Remapping Failure Occurred":
                remap_failure |= value == "Yes"

        # None where the GPU printed no counter of that kind (N/A): unknown is not zero.
        total = {
            (scope, kind): counts[scope][kind] if seen[scope][kind] else None
            for scope in ("volatile", "aggregate")
            for kind in (0, 1)
        }

        gpus.append(
            GpuEcc(
                bus_id=bus_id,
                ecc_mode=ecc_mode,
                volatile_corrected=total["volatile", 0],
                volatile_uncorrected=total["volatile", 1],
                aggregate_corrected=total["aggregate", 0],
                aggregate_uncorrected=total["aggregate", 1],
                pending_retirement=pending_retirement,
                pending_remap=pending_remap,
                remap_failure=remap_failure,
            )
        )
    return gpus


def _ecc_kind(path: tuple[str, ...]) -> int | None:
    """0 for a corrected counter, 1 for an uncorrected one, ``None`` for a line that is not a counter."""
    if path[0] in ("Single Bit", "Double Bit"):
        # Old layout: count the group's Total only.
        return (0 if path[0] == "Single Bit" else 1) if path[-1] == "Total" else None
    key = path[-1]
    if "Uncorrectable" in key:
        return 1
    if "Correctable" in key:
        return 0
    return None


def _count(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def _gpu_sections(text: str) -> Iterator[tuple[str, list[tuple[tuple[str, ...], str]]]]:
    """Each GPU section as ``(bus id, [(section path, value), ...])``, the path built from indentation."""
    bus_id: str | None = None
    leaves: list[tuple[tuple[str, ...], str]] = []
    stack: list[tuple[int, str]] = []  # (indent, section name) of the open sections
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if indent == 0:
            if bus_id is not None:
                yield bus_id, leaves
            match = re.fullmatch(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])", line)
            bus_id = match.group(1) if match else None
            leaves, stack = [], []
            continue
        if bus_id is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.partition(":")
        if sep and value.strip():
            leaves.append(((*[name for _, name in stack], key.strip()), value.strip()))
        else:
            stack.append((indent, key.strip()))
    if bus_id is not None:
        yield bus_id, leaves


# --- checks ----------------------------------------------------------------------------------------------


def check_gpu_inventory(query: CommandOutput | None, config: PreflightConfig) -> CheckResult:
    """The GPUs the driver sees against the expected count and model."""
    name = "gpu_inventory"
    expected = config.expected_gpu_count
    if expected == 0:
        return CheckResult(name, True, "no GPUs expected on this node")
    if query is None or (not query.succeeded and not query.stdout.strip()):
        why = query.failure() if query is not None else "nvidia-smi was not run"
        return CheckResult(name, False, f"expected {expected} GPU(s) but cannot list them: {why}")
    try:
        gpus = parse_gpu_query_csv(query.stdout, query.command)
    except CommandOutputError as exc:
        return CheckResult(name, False, str(exc))
    problems = []
    if len(gpus) != expected:
        problems.append(f"{len(gpus)} GPU(s) visible, expected {expected}")
    lost = unreadable_gpu_lines(query.stdout)
    if lost:
        problems.append(f"nvidia-smi: {lost[0]}")
    if config.expected_gpu_model:
        wrong = [g for g in gpus if config.expected_gpu_model.lower() not in g.name.lower()]
        if wrong:
            listed = ", ".join(f"GPU {g.index} is {g.name!r}" for g in wrong)
            problems.append(f"expected model {config.expected_gpu_model!r}: {listed}")
    if problems:
        return CheckResult(name, False, "; ".join(problems))
    models = sorted({g.name for g in gpus})
    return CheckResult(name, True, f"{len(gpus)} GPU(s): {', '.join(models)}")


def check_gpu_ecc(query: CommandOutput | None, config: PreflightConfig) -> CheckResult:
    """ECC since boot (volatile counters), pending page retirement or row remapping, remapping failures."""
    name = "gpu_ecc"
    if config.expected_gpu_count == 0:
        return CheckResult(name, True, "no GPUs expected on this node")
    if query is None or not query.succeeded:
        why = query.failure() if query is not None else "nvidia-smi -q was not run"
        return CheckResult(name, False, f"cannot read ECC counters: {why}")
    gpus = parse_nvidia_smi_q(query.stdout)
    if not gpus:
        return CheckResult(name, False, f"`{query.command}` printed no GPU section")
    problems, lifetime = [], []
    for gpu in gpus:
        where = f"GPU {gpu.bus_id}"
        if config.require_ecc_enabled and gpu.ecc_mode != "Enabled":
            problems.append(f"{where} ECC mode is {gpu.ecc_mode or 'N/A'}, not Enabled")
        if (gpu.volatile_uncorrected or 0) > config.max_volatile_uncorrected_ecc:
            problems.append(f"{where} {gpu.volatile_uncorrected} uncorrected ECC error(s) since boot")
        if (gpu.volatile_corrected or 0) > config.max_volatile_corrected_ecc:
            problems.append(f"{where} {gpu.volatile_corrected} corrected ECC error(s) since boot")
        if gpu.remap_failure:
            problems.append(f"{where} row remapping failed (replace the GPU)")
        if gpu.pending_remap or gpu.pending_retirement:
            problems.append(f"{where} a row remap or page retirement is pending (reset the GPU)")
        if gpu.aggregate_corrected or gpu.aggregate_uncorrected:
            lifetime.append(
                f"{where} {gpu.aggregate_corrected or 0} corrected/{gpu.aggregate_uncorrected or 0} uncorrected"
            )
    if problems:
        return CheckResult(name, False, "; ".join(problems))
    note = f"; lifetime (aggregate) counts not gated: {', '.join(lifetime)}" if lifetime else ""
    return CheckResult(name, True, f"{len(gpus)} GPU(s), no ECC errors since boot{note}")
