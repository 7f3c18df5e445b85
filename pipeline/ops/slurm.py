"""Read Slurm's ``scontrol show node`` and ``scontrol show reservation`` output, and expand host lists.

``scontrol`` prints one record per node or reservation: ``Key=Value`` pairs over indented lines, records
separated by blank lines. A few values hold spaces (``Reason=Kill task failed [slurm@2025-03-02T09:14:07]``,
``OS=Linux 5.15.0 #115-Ubuntu SMP ...``): those keys take the rest of their line, and any other word without
``=`` continues the previous value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pipeline.ops.model import CommandOutputError

#: Keys whose value runs to the end of the line.
_FREE_TEXT_KEYS = ("Reason", "OS", "Comment", "Extra")
# "Kill task failed [slurm@2025-03-02T09:14:07]": the user and time scontrol appends to a reason.
_REASON_SETTER = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]]+)@(?P<time>[^\]]+)\]\s*$")


#: The most names one host list may expand to: past the largest Slurm cluster, and a bound on what a
#: garbled range (gpu[1-999999999]) takes in memory.
MAX_HOSTLIST_NAMES = 1 << 20


def parse_records(text: str, first_key: str) -> list[dict[str, str]]:
    """Every record of ``scontrol show ...`` output as a dict; a record starts at a ``first_key=`` line."""
    records: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(f"{first_key}="):
            current = {}
            records.append(current)
        elif current is None:
            if line.startswith("No ") and "in the system" in line:  # "No reservations in the system"
                continue
            raise CommandOutputError(f"scontrol show ({first_key})", f"expected a {first_key}= line", line)
        free = next((k for k in _FREE_TEXT_KEYS if line.startswith(f"{k}=")), None)
        if free is not None:
            current[free] = line[len(free) + 1 :].strip()
            continue
        last: str | None = None
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", key):
                current[key] = value
                last = key
            elif last is not None:
                current[last] += f" {word}"
    return records


@dataclass(frozen=True)
class SlurmNode:
    """A node as the controller sees it."""

    name: str
    state: str  # base state: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, MAINT, REBOOT_REQUESTED, ...
    reason: str  # without the "[user@time]" suffix
    reason_user: str | None
    reason_time: datetime | None

    @property
    def drained(self) -> bool:
        """Drained or draining: DRAIN is a flag on any base state (IDLE+DRAIN, MIXED+DRAIN)."""
        return "DRAIN" in self.flags or self.state in {"DRAINED", "DRAINING"}


def parse_nodes(text: str) -> list[SlurmNode]:
    """The nodes of ``scontrol show node`` (all nodes, or the one named) output."""
    nodes = []
    for record in parse_records(text, "NodeName"):
        state, *flags = record.get("State", "UNKNOWN").split("+")
        reason = record.get("Reason", "")
        user = when = None
        match = _REASON_SETTER.match(reason)
        if match:
            reason, user = match["text"], match["user"]
            when = _slurm_time(match["time"])
        nodes.append(
            SlurmNode(
                name=record["NodeName"],
                state=state,
                flags=frozenset(flags),
                reason="" if reason == "None" else reason,
                reason_user=user,
                reason_time=when,
            )
        )
    return nodes


@dataclass(frozen=True)
class Reservation:
    """A reservation as ``scontrol show reservation`` prints it (times are the controller's local time)."""

    name: str
    start: datetime | None
    end: datetime | None
    nodes: tuple[str, ...]
    users: tuple[str, ...]
    flags: frozenset[str]
    state: str


def parse_reservations(text: str) -> list[Reservation]:
    """The reservations of ``scontrol show reservation`` output (none for "No reservations in the system")."""
    reservations = []
    for record in parse_records(text, "ReservationName"):
        nodes = record.get("Nodes", "")
        users = record.get("Users", "")
        reservations.append(
            Reservation(
                name=record["ReservationName"],
                start=_slurm_time(record.get("StartTime", "")),
                end=_slurm_time(record.get("EndTime", "")),
                nodes=tuple(expand_hostlist(nodes)) if nodes not in ("", "(null)") else (),
                users=tuple(u for u in users.split(",") if u and u != "(null)"),
                flags=frozenset(f for f in record.get("Flags", "").split(",") if f),
                state=record.get("State", "UNKNOWN"),
            )
        )
    return reservations


def _slurm_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None  # "Unknown", "None", "(null)"


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm host list: ``gpu[01-03,07],cpu1`` → gpu01, gpu02, gpu03, gpu07, cpu1.

    Zero padding follows the range's first bound; several bracket groups multiply
    (``r[1-2]n[1-2]`` → r1n1, r1n2, r2n1, r2n2), as ``scontrol show hostnames`` does.
    """
    names: list[str] = []
    for item in _split_top_level(hostlist):
        names += _expand_one(item)
    return names


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]+)\]", item)
    if not match:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end() :]
    out = []
    for part in match.group(1).split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise CommandOutputError("hostlist", "a range is not numeric", item)
        width = len(low)
        for number in range(int(low), int(high if sep else low) + 1):
            out += _expand_one(f"{prefix}{number:0{width}d}{suffix}")
            if len(out) > MAX_HOSTLIST_NAMES:  # said before the names take the controller's memory
                raise CommandOutputError("hostlist", f"more than {MAX_HOSTLIST_NAMES} names", item)
    return out
