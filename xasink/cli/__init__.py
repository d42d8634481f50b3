"""The `xasink` command line: recover, jobs, resolve, reset-sink, prune, check, init. Its
arguments are `parser`'s; each command's handler is in the module `COMMANDS` names, imported
once the arguments are parsed: `xasink --help` (or a mistyped option) starts at once, and a
command loads what it uses (the JVM's bridge and the journal's code), never Spark, pandas or
Arrow."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TextIO

from ..errors import XasinkError
from ..masking import Redactor
from ..spec import secrets_of
from .parser import EXIT_ERROR, parse

#: Each command's module; its `run(args, ask)` returns the exit status. The one import of
#: xasink's code by name in the command line (tests/unit/test_layers.py holds it to this).
COMMANDS = {
    "recover": "xasink.cli.recovery",
    "jobs": "xasink.cli.journal",
    "resolve": "xasink.cli.journal",
    "reset-sink": "xasink.cli.journal",
    "prune": "xasink.cli.journal",
    "check": "xasink.cli.health",
    "init": "xasink.cli.setup",
}
#: The logger of recovery's actions (`protocol.actions.RECOVERY_LOGGER`): `recover` and
#: `resolve` print each action as a line of their report, so their log line, the same
#: words, stays out of stderr (a library's handlers still get it).
REPORTED = "xasink.recover"


def command_module(command: str) -> ModuleType:
    """The module of `command` (see `COMMANDS`), imported now."""
    return importlib.import_module(COMMANDS[command])


def main(
    argv: Sequence[str] | None = None,
    ask: Callable[[str], str] = input,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one command; its report goes to `out`, errors to `err` (default: the process's
    stdout and stderr). Returns the exit status."""
    args = parse(argv)
    args.out, args.err = out or sys.stdout, err or sys.stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(lambda record: record.name != REPORTED)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    try:
        status: int = command_module(args.command).run(args, ask)
        return status
    except XasinkError as exc:
        print(f"xasink: {_secrets(args)(str(exc))}", file=args.err)
    except Exception as exc:  # never a traceback, never a secret: exit 2 means "error"
        text = _secrets(args)(f"{type(exc).__name__}: {exc}")
        print(f"xasink: unexpected error: {text}", file=args.err)
    return EXIT_ERROR


def _secrets(args: argparse.Namespace) -> Redactor:
    """Masks every password the command was given: --password-env's, each
    --participant-password-env's, and any in its URLs."""
    names = [args.password_env, *(getattr(args, "participant_password_env", None) or [])]
    urls = [args.url, *(getattr(args, "participant", None) or [])]
    return Redactor([*(os.environ.get(n) for n in names if n), *secrets_of(urls)])


if __name__ == "__main__":
    sys.exit(main())
