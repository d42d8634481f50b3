"""Print the failover tally: `python -m tests.failover_report [results.jsonl]`.

Reads the JSON lines tests/test_failover.py appended (XASINK_FAILOVER_RESULTS, default
.pytest_cache/xasink-failover/results.jsonl) and prints one row per (kill point, mode): how
many runs, how many ended all-or-nothing on the promoted standby, the prepared transactions
left there after recovery, how many ended with the old contents and with the new ones, and
how many reruns (the write run again, or a stream's replay) gave exactly the new contents.
Exit status 1 when a run failed a check, was not all-or-nothing, or left one prepared.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

try:  # python -m tests.failover_report
    from tests.chaos_report import print_table
except ImportError:  # tests/ on sys.path
    from chaos_report import print_table  # type: ignore[no-redef]

DEFAULT = Path(__file__).parent.parent / ".pytest_cache" / "xasink-failover" / "results.jsonl"


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else os.environ.get("XASINK_FAILOVER_RESULTS") or DEFAULT)
    if not path.exists():
        print(f"no failover results at {path}")
        return 1
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    order: dict[str, int] = {}
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 8)
    for row in rows:
        order.setdefault(row["point"], len(order))
        t = tally[(row["point"], row["mode"])]
        t[0] += 1
        t[1] += row["outcome"] in ("old", "new")
        t[2] += row["prepared_left"]
        t[3] += row["outcome"] == "old"
        t[4] += row["outcome"] == "new"
        t[5] += row["rerun"] != "-"
        t[6] += row["rerun"] == "new"
        t[7] += not row["ok"]
    header = (
        "kill point",
        "mode",
        "runs",
        "all-or-nothing",
        "prepared left",
        "old",
        "new",
        "rerun exact",
        "failed checks",
    )
    cells = [
        _cells(point, mode, t)
        for (point, mode), t in sorted(tally.items(), key=lambda i: (order[i[0][0]], i[0][1]))
    ]
    print_table(header, cells)
    failovers = [row["failover_seconds"] for row in rows if "failover_seconds" in row]
    if failovers:
        print(
            f"{len(rows)} runs; SIGKILL of the primary to a promoted standby: "
            f"{min(failovers):.2f}-{max(failovers):.2f}s"
        )
    bad = any(t[1] != t[0] or t[2] or t[7] or t[6] != t[5] for t in tally.values())
    return 1 if bad else 0


def _cells(point: str, mode: str, t: list[int]) -> tuple[str, ...]:
    runs, whole, prepared, old, new, reruns, exact, failed = t
    return (
        point,
        mode,
        str(runs),
        f"{whole}/{runs}",
        str(prepared),
        str(old),
        str(new),
        f"{exact}/{reruns}",
        str(failed),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
