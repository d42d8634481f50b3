"""What several commands share: the database their options name, the passwords their
variables hold, a confirmation, a one-line report. Nothing here loads database code."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from ..errors import XasinkError
from ..spec import Database


def database(args: argparse.Namespace) -> Database:
    """The database --url and its flags name (the password from --password-env's variable)."""
    return Database(
        args.url,
        user=args.user,
        password=env(args.password_env, "--password-env") if args.password_env else None,
        jars=args.jars,
        dialect=args.dialect,
        xa_datasource=args.xa_datasource,
        journal_schema=args.journal_schema,
        network_timeout=args.network_timeout,
        session_init=args.session_init or None,
    )


def participants(args: argparse.Namespace, own: Database) -> list[Database]:
    envs = args.participant_password_env
    if len(envs) not in (0, 1, len(args.participant)) or (envs and not args.participant):
        raise XasinkError("give --participant-password-env once, or once per --participant")
    found = []
    for i, url in enumerate(args.participant):  # never --url's password: its own, or none
        pw = env(envs[min(i, len(envs) - 1)], "--participant-password-env") if envs else None
        user = None if "user=" in url else own.user  # the URL's own login, else --user
        found.append(Database(url, user=user, password=pw, jars=own.jars))
    return found


def env(name: str, option: str) -> str:
    """A password, from the environment variable `option` names. The name is not repeated
    in an error: a shell that expanded `$VAR` passed the password itself."""
    if name not in os.environ:
        raise XasinkError(
            f"the environment variable that {option} names is not set (its name is not "
            "repeated: a shell that expanded $VAR passed the password itself)"
        )
    return os.environ[name]


def confirmed(args: argparse.Namespace, ask: Callable[[str], str], what: str, word: str) -> bool:
    """--yes, or the operator typed `word` at the prompt (never without a terminal)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise XasinkError(f"{args.command} asks for confirmation: pass --yes in scripts")
    if ask(f"{what}? Type {word!r} to confirm: ").strip() == word:
        return True
    print("xasink: not confirmed; nothing changed", file=args.err)
    return False


def said(args: argparse.Namespace, text: str, **figures: object) -> str:
    """The command's one line of report: `text`, or its figures as JSON with --json."""
    return json.dumps(figures) if args.json else text


__all__ = ["confirmed", "database", "env", "participants", "said"]
