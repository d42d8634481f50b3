"""`xasink init`: an administrator creates the journal, and learns what a writer login
needs on it (printed as SQL to run, or as JSON)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from ..protocol.setup import set_up
from .common import database
from .parser import EXIT_OK


def run(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    done = set_up(database(args), args.writer, lock_wait=args.lock_wait)
    if args.json:
        print(json.dumps(vars(done) | {"grants": done.grants}), file=args.out)
        return EXIT_OK
    what = "created" if done.created else "exists"
    where = done.schema or "the connection's default schema"  # a dialect that cannot name it
    print(f"-- xasink journal in {where}: {what} (layout {done.version})", file=args.out)
    for writes, grants in done.grants.items():
        print(f"-- {writes}:", file=args.out)
        for grant in grants:
            print(f"{grant};", file=args.out)
    return EXIT_OK


__all__ = ["run"]
