"""CPU seconds one run spends: the whole machine's busy time and the database server's own.

On 2 cores a write is bound by CPU when the machine is busy for nearly 2 seconds of every
second of the run; the servers' share then says how much of it loading the rows costs,
and the rest is Spark's, the writer's and the client's. The servers' time is every
database server process's on the machine (the idle system servers add next to nothing)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuReading:
    machine_busy: float  # seconds, summed over every core, since boot
    servers: dict[int, float]  # database server processes: pid -> user + system seconds


#: Process names of the database servers (PostgreSQL runs one process per connection).
SERVER_NAMES = frozenset({"mariadbd", "mysqld", "postgres"})


def read() -> CpuReading:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return CpuReading(busy / _TICKS, _server_seconds())


def spent(before: CpuReading, after: CpuReading) -> dict[str, float]:
    """Core-seconds between two readings: the machine's busy time and the servers'. A
    process that started in between counts from zero; one that ended (a PostgreSQL
    backend) is in its parent's reaped children's time, which is counted too."""
    servers = sum(s - before.servers.get(pid, 0.0) for pid, s in after.servers.items())
    return {"machine": after.machine_busy - before.machine_busy, "server": servers}


def _server_seconds() -> dict[int, float]:
    seconds = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if name in SERVER_NAMES:
            after_name = rest.split()
            own_and_reaped = after_name[11:15]  # utime, stime, cutime, cstime
            seconds[int(stat_file.parent.name)] = sum(map(int, own_and_reaped)) / _TICKS
    return seconds
