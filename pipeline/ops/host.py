"""Host checks from command output: Xid errors in the kernel log since boot, local disk free, container
runtimes that answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ByteSize

from pipeline.ops.config import ContainerRuntime, PreflightConfig
from pipeline.ops.model import CheckResult, CommandOutput, CommandOutputError

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
_XID = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<code>\d+),\s*(?P<detail>.*)")
# journalctl separates boots with "-- Boot <id> --" (older systemd: "-- Reboot --").
_BOOT_MARKER = re.compile(r"^-- (?:Boot [0-9a-f]+|Reboot) --$")


@dataclass(frozen=True)
class XidEvent:
    """One Xid line of the kernel log."""

    code: int
    device: str
    detail: str
    line: str


def since_last_boot(kernel_log: str) -> str:
    """The part of a kernel log after its last boot marker (all of it when there is none, as for ``dmesg``
    or ``journalctl -k -b``, which only ever hold the current boot)."""
    lines = kernel_log.splitlines()
    starts = [i for i, line in enumerate(lines) if _BOOT_MARKER.match(line.strip())]
    return "\n".join(lines[starts[-1] + 1 :] if starts else lines)


def parse_xid_events(kernel_log: str) -> list[XidEvent]:
    """Every Xid event of the current boot, in log order."""
    events = []
    for line in since_last_boot(kernel_log).splitlines():
        match = _XID.search(line)
        if match:
            events.append(
                XidEvent(int(match["code"]), match["device"], match["detail"].strip(), line.strip())
            )
    return events


def check_xid(kernel_log: CommandOutput | None, config: PreflightConfig) -> CheckResult:
    """Fail on any Xid since boot except those attributed to the application (``ignored_xids``)."""
    name = "gpu_xid"
    if config.expected_gpu_count == 0:
        return CheckResult(name, True, "no GPUs expected on this node")
    if kernel_log is None or not kernel_log.succeeded:
        why = kernel_log.failure() if kernel_log is not None else "no kernel log was read"
        return CheckResult(name, False, f"cannot read the kernel log: {why}")
    events = parse_xid_events(kernel_log.stdout)
    bad = [e for e in events if e.code not in config.ignored_xids]
    if bad:
        codes = sorted({e.code for e in bad})
        first = bad[0]
        return CheckResult(
            name,
            False,
            f"Xid {', '.join(map(str, codes))} since boot ({len(bad)} event(s)); first: "
            f"Xid {first.code} on {first.device}: {first.detail}",
        )
    if events:
        codes = sorted({e.code for e in events})
        return CheckResult(
            name, True, f"only application Xid(s) {', '.join(map(str, codes))} since boot (not gated)"
        )
    return CheckResult(name, True, "no Xid since boot")


# --- disk --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskFree:
    """One row of ``df -B1 --output=file,size,avail,target``: the path asked about and its file system."""

    path: str
    size_bytes: int
    avail_bytes: int
    mount: str


def parse_df(text: str, command: str = "df") -> dict[str, DiskFree]:
    """Rows of ``df -B1 --output=file,size,avail,target PATH...`` keyed by the path as given."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].split()[:1] == ["File"]:
        raise CommandOutputError(command, "expected the header of `df --output=file,size,avail,target`", text)
    rows = {}
    for line in lines[1:]:
        parts = line.split(None, 3)
        if len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
            raise CommandOutputError(command, "a row is not 'path size avail mount'", line)
        rows[parts[0]] = DiskFree(parts[0], int(parts[1]), int(parts[2]), parts[3])
    return rows


def check_disk_free(df: CommandOutput | None, config: PreflightConfig) -> CheckResult:
    """Every configured path's file system keeps at least its minimum free. Transient: space can be freed."""
    name = "disk_free"
    if not config.min_free_bytes:
        return CheckResult(name, True, "no disk minimum configured", transient=True)
    if df is None or not df.stdout.strip():
        why = df.failure() if df is not None else "df was not run"
        return CheckResult(name, False, f"cannot read free space: {why}", transient=True)
    try:
        rows = parse_df(df.stdout, df.command)
    except CommandOutputError as exc:
        return CheckResult(name, False, str(exc), transient=True)
    problems, fine = [], []
    for path, minimum in sorted(config.min_free_bytes.items()):
        row = rows.get(path)
        if row is None:
            problems.append(f"{path}: not reported by df ({df.failure() if not df.succeeded else 'missing'})")
        elif row.avail_bytes < minimum:
            problems.append(
                f"{path} ({row.mount}) has {_human(row.avail_bytes)} free, needs {_human(int(minimum))}"
            )
        else:
            fine.append(f"{path} {_human(row.avail_bytes)} free")
    if problems:
        return CheckResult(name, False, "; ".join(problems), transient=True)
    return CheckResult(name, True, ", ".join(fine), transient=True)


def _human(size_bytes: int) -> str:
    return ByteSize(size_bytes).human_readable(decimal=False)


# --- container runtimes ------------------------------------------------------------------------------------


def check_container_runtimes(
    probes: Mapping[ContainerRuntime, CommandOutput], config: PreflightConfig
) -> CheckResult:
    """Every required runtime answered its probe. Transient: a stopped daemon is restarted, not replaced."""
    name = "container_runtime"
    if not config.container_runtimes:
        return CheckResult(name, True, "no container runtime required", transient=True)
    problems, fine = [], []
    for runtime in config.container_runtimes:
        probe = probes.get(runtime)
        if probe is None:
            problems.append(f"{runtime}: not probed")
        elif not probe.succeeded:
            problems.append(f"{runtime}: {probe.failure()}")
        else:
            version = probe.stdout.strip().splitlines()
            fine.append(f"{runtime} {version[0].strip() if version else 'present'}")
    if problems:
        return CheckResult(name, False, "; ".join(problems), transient=True)
    return CheckResult(name, True, ", ".join(fine), transient=True)
