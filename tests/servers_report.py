"""Say which database servers the last `make test` tested: `python -m tests.servers_report`.

Each pytest process of the run appends what it tested to the record (tests/conftest.py);
this prints one line from the records since SINCE (a Unix time, e.g. the run's start), naming
every server kind with the version tested or NOT TESTED and why, and clears the records so
the next run starts afresh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Every kind a full run tests; the line names each, with its version or why it was not tested.
KINDS = ("derby", "mariadb", "mariadb11", "mysql", "postgres")
RECORD = Path(__file__).parent.parent / ".pytest_cache" / "xasink-servers.jsonl"


def main(argv: list[str]) -> int:
    since = float(argv[0]) if argv else 0.0
    tested: dict[str, str] = {}
    missing: dict[str, str] = {}
    if RECORD.exists():
        for line in RECORD.read_text().splitlines():
            row = json.loads(line)
            if row["at"] >= since:
                tested.update(row["tested"])
                missing.update(row["not"])
        RECORD.unlink()
    words = []
    for kind in sorted({*KINDS, *tested, *missing}):
        if kind in tested:
            words.append(f"{kind} {tested[kind]}")
        else:
            words.append(f"{kind} NOT TESTED: {missing.get(kind, 'no test of this run used it')}")
    print("servers: " + "; ".join(words))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
