"""Where write_xa's time goes, and whether a worker's memory grows with its partition.

    python -m benchmarks.breakdown stages [--rows 1m] [--databases postgres,mariadb]
    python -m benchmarks.breakdown memory [--databases postgres,mariadb] [--sizes 1m,10m]
    python -m benchmarks.breakdown fixed [--databases postgres,mariadb] [--calls 15]
        [--count-calls 5] [--label NAME]
    python -m benchmarks.breakdown branches [--rows 1m] [--databases mariadb]
    python -m benchmarks.breakdown format-batch [--databases postgres,mariadb] [--calls 100]
    python -m benchmarks.breakdown order [--rows 200k] [--databases postgres,mariadb]
    python -m benchmarks.breakdown together [--databases postgres,mariadb] [--streams 4]
        [--rounds 2]

`stages` times the same cached DataFrame through cumulative stages, each a real Spark job,
and `memory` compares a worker's peak RSS for one partition of 1M and of 10M rows
(benchmarks/stages.py). `fixed` splits many small calls of write_xa into their driver steps
beside Spark JDBC and the floors, and counts one call's statements, connections, commits
and prepares on the server (benchmarks/fixed.py). `branches` writes with 1, 2 and 4 branches
beside the raw load with as many concurrent streams: how many the server absorbs
(benchmarks/branches.py). `format-batch` runs a `format("xasink")` micro-batch's steps in one
process, next to the raw load of its rows (benchmarks/format_batch.py). `order` times upsert
and merge into a table that stores the order column next to one that does not
(benchmarks/order_cost.py). `together` runs several streams at once through one driver and
one journal, beside one alone, for xasink's foreach_batch and the collect-only floor
(benchmarks/together.py). `--label` writes results/breakdown-<mode>-<label>.{md,json}
instead of overwriting results/breakdown-<mode>.{md,json}; `--output-dir DIR` writes them
into DIR instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import branches, fixed, format_batch, order_cost, stages, together
from benchmarks.workloads import parse_count

RESULTS = Path(__file__).parent / "results"

#: A mode's run: (the parsed arguments, the databases) -> (the report, its markdown).
Mode = Callable[[argparse.Namespace, list[str]], tuple[dict[str, Any], str]]


def _stages(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = stages.stages(databases, parse_count(args.rows))
    return report, stages.markdown(report)


def _memory(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = stages.memory(databases, [parse_count(s) for s in args.sizes.split(",")])
    return report, stages.memory_markdown(report)


def _fixed(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = fixed.fixed(databases, args.calls, args.count_calls)
    return report, fixed.markdown(report)


def _branches(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = branches.branch_counts(databases, parse_count(args.rows))
    return report, branches.markdown(report)


def _format_batch(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = format_batch.format_batch(databases, args.calls or 100, args.count_calls)
    return report, format_batch.markdown(report)


def _order(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = order_cost.order_cost(databases, parse_count(args.rows))
    return report, order_cost.markdown(report)


def _together(args: argparse.Namespace, databases: list[str]) -> tuple[dict[str, Any], str]:
    report = together.together(databases, args.streams, args.rounds)
    return report, together.markdown(report)


MODES: dict[str, Mode] = {
    "stages": _stages,
    "memory": _memory,
    "fixed": _fixed,
    "branches": _branches,
    "format-batch": _format_batch,
    "order": _order,
    "together": _together,
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=tuple(MODES))
    parser.add_argument("--databases", default="postgres,mariadb")
    parser.add_argument("--rows", help="rows for `stages`, `branches` (default 1m), `order` (200k)")
    parser.add_argument("--sizes", default="1m,10m", help="partition sizes for `memory`")
    parser.add_argument(
        "--calls",
        type=int,
        help="`fixed`: timed calls per contender (default: 15); `format-batch`: batches (100)",
    )
    parser.add_argument(
        "--count-calls",
        type=int,
        default=fixed.COUNT_CALLS,
        help="`fixed`: calls counted by the server per writer "
        f"(default {fixed.COUNT_CALLS}; 0: none)",
    )
    parser.add_argument("--streams", type=int, default=4, help="`together`: queries at once")
    parser.add_argument("--rounds", type=int, default=2, help="`together`: rounds")
    parser.add_argument(
        "--label", default="", help="results go to breakdown-<mode>-<label>.{md,json}"
    )
    parser.add_argument("--output-dir", type=Path, default=RESULTS, help="default: results/")
    args = parser.parse_args(argv)
    args.rows = args.rows or ("200k" if args.mode == "order" else "1m")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    databases = [d for d in args.databases.split(",") if d]
    args.output_dir.mkdir(parents=True, exist_ok=True)
    report, text = MODES[args.mode](args, databases)
    print(text)
    name = f"breakdown-{args.mode}" + (f"-{args.label}" if args.label else "")
    (args.output_dir / f"{name}.md").write_text(text + "\n")
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
