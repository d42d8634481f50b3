"""Print the chaos suite's tally: `python -m tests.chaos_report [results.jsonl]`.

Reads the JSON lines tests/test_chaos.py appended (XASINK_CHAOS_RESULTS, default
.pytest_cache/xasink-chaos/results.jsonl) and prints one row per (fault, database).
Exit status 1 when a run was not all-or-nothing or left a branch.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

DEFAULT = Path(__file__).parent.parent / ".pytest_cache" / "xasink-chaos" / "results.jsonl"


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else os.environ.get("XASINK_CHAOS_RESULTS") or DEFAULT)
    if not path.exists():
        print(f"no chaos results at {path}")
        return 1
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tally: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for row in rows:
        t = tally[(row["fault"], row["db"])]
        t[0] += 1
        t[1] += row["outcome"] in ("old", "new")
        t[2] += row["branches_left"]
        t[3] += row["outcome"] == "old"
        t[4] += row["outcome"] == "new"
    header = ("fault", "database", "runs", "all-or-nothing", "branches left", "old", "new")
    print_table(
        header,
        [
            (fault, db, str(t[0]), f"{t[1]}/{t[0]}", str(t[2]), str(t[3]), str(t[4]))
            for (fault, db), t in sorted(tally.items())
        ],
    )
    bad = any(t[1] != t[0] or t[2] for t in tally.values())
    return 1 if bad else 0


def print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """`rows` under `header`, in columns as wide as their widest cell."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
