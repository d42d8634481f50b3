"""Say which database servers the last `make test` tested: `python -m tests.servers_report`.

Each pytest process of the run appends what it tested to the record (tests/conftest.py);
this prints one line from the records since SINCE (a Unix time, e.g. the run's start), and
clears them so the next run starts afresh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
    for kind in tested:
        missing.pop(kind, None)
    words = [f"{kind} {version}" for kind, version in sorted(tested.items())]
    words += [f"{kind} NOT TESTED: {why}" for kind, why in sorted(missing.items())]
    print("servers tested: " + ("; ".join(words) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
