"""The `xasink` command line, in-process: argument parsing, help, exit codes, what it
prints, and that it never prints a secret (the database calls are replaced by fakes)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
from types import SimpleNamespace

import pytest

from xasink import Database, cli
from xasink.cli import common, journal, main, recovery
from xasink.cli.parser import parse
from xasink.errors import PreflightError
from xasink.protocol.recovery import BranchAction, RecoveryReport
from xasink.tables.applier import STAGED_APPLY

JOB = "0123456789abcdef0123456789abcdef"
URL = "jdbc:postgresql://db/app"
SECRET = "s3cr3t-Pa55word!"


class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def run(argv, ask=None):
    """main() with its own streams: (exit status, stdout text, stderr text)."""
    out, err = io.StringIO(), io.StringIO()
    asked = ask or (lambda prompt: pytest.fail(f"asked {prompt!r}"))
    status = main(argv, ask=asked, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_help_lists_the_commands_and_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: xasink [-h] COMMAND ...")
    listed = re.findall(r"^    (\S+)", text, re.MULTILINE)
    assert listed == ["recover", "jobs", "resolve", "reset-sink", "prune", "check", "init"]
    assert "Exit status: 0 done and nothing left in doubt, 1 something is left" in " ".join(
        text.split()
    )


def test_subcommand_help(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["recover", "--help"])
    assert caught.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: xasink recover [-h] --url URL")
    assert "--presume-abort TAG" in text and "--password-env VAR" in text


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ([], "xasink: error: the following arguments are required: COMMAND"),
        (["vacuum"], "xasink: error: argument COMMAND: invalid choice: 'vacuum'"),
        (["recover"], "xasink recover: error: the following arguments are required: --url"),
        (
            ["recover", "--url", URL, "--grace", "soon"],
            "xasink recover: error: argument --grace: invalid float value: 'soon'",
        ),
        (
            ["jobs", "--url", URL, "--dialect", "oracle"],
            "xasink jobs: error: argument --dialect: invalid choice: 'oracle'",
        ),
        (
            ["jobs", "--url", URL, "--limit", "many"],
            "xasink jobs: error: argument --limit: invalid int value: 'many'",
        ),
        (
            ["resolve", JOB, "--url", URL],
            "xasink resolve: error: the following arguments are required: --abandon",
        ),
        (
            ["resolve", "--abandon", "--url", URL],
            "xasink resolve: error: the following arguments are required: JOB",
        ),
        (
            ["prune", "--url", URL, "--older-than", "7", "--set-retention", "3"],
            "xasink prune: error: argument --set-retention: not allowed with argument --older-than",
        ),
        (["prune", "--url", URL, "--older-than", "7", "--all"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_usage(capsys, argv, error):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: xasink")
    assert error in captured.err


def test_a_misplaced_url_is_not_echoed_with_its_password(capsys):
    with pytest.raises(SystemExit):
        main(["recover", "--url", URL, f"jdbc:postgresql://u:{SECRET}@db/app"])
    assert SECRET not in capsys.readouterr().err


def test_password_env_that_is_not_set(monkeypatch):
    monkeypatch.delenv("XASINK_UNIT_NO_SUCH_VAR", raising=False)
    status, out, err = run(["recover", "--url", URL, "--password-env", "XASINK_UNIT_NO_SUCH_VAR"])
    assert (status, out) == (2, "")
    assert err == (
        "xasink: the environment variable that --password-env names is not set (its name is "
        "not repeated: a shell that expanded $VAR passed the password itself)\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "--url", URL, "--password-env", "hunter2"],  # `--password-env $PGPASSWORD`
        ["jobs", "--url", URL, "-p", "hunter2"],  # the mysql habit
        ["--password", "hunter2", "jobs", "--url", URL],  # before the command
        ["jobs", "--url", URL, "hunter2"],  # a stray value
    ],
)
def test_a_password_that_looks_like_a_word_is_never_echoed(monkeypatch, capsys, argv):
    """A value that may be the password, wherever it stands, is not repeated in the error
    (argparse's own errors exit, on the process's streams)."""
    monkeypatch.delenv("hunter2", raising=False)
    try:
        status, out, err = run(argv)
    except SystemExit as exited:
        status, out, err = exited.code, *capsys.readouterr()
    assert status == 2 and "hunter2" not in out + err, err


def test_reset_sink_checks_the_sink_id_first():
    status, out, err = run(["reset-sink", " padded", "--url", URL, "--yes"])
    assert (status, out) == (2, "")
    assert err.startswith("xasink: sink_id must be 1 to 200 printable ASCII characters")


def test_confirmation_needs_a_terminal_or_yes(monkeypatch):
    monkeypatch.setattr("sys.stdin", Terminal(tty=False))
    status, out, err = run(["resolve", JOB, "--abandon", "--url", URL])
    assert (status, out) == (2, "")
    assert err == "xasink: resolve asks for confirmation: pass --yes in scripts\n"


@pytest.mark.parametrize(
    ("argv", "prompt"),
    [
        (
            ["resolve", JOB, "--abandon", "--url", URL],
            f"Abandon job {JOB}? Type '{JOB}' to confirm: ",
        ),
        (
            ["reset-sink", "orders", "--url", URL],
            "Forget the last batch of sink 'orders'? Type 'orders' to confirm: ",
        ),
    ],
)
def test_a_wrong_answer_changes_nothing(monkeypatch, argv, prompt):
    monkeypatch.setattr("sys.stdin", Terminal(tty=True))
    prompts = []

    def ask(text):
        prompts.append(text)
        return "yes"

    status, out, err = run(argv, ask)
    assert (status, out, err) == (2, "", "xasink: not confirmed; nothing changed\n")
    assert prompts == [prompt]


# -- commands with the database calls replaced ----------------------------------------------
def _report(*actions):
    return RecoveryReport(False, "journal in the default schema, tag a1b2c3d4", list(actions))


@pytest.fixture
def recover_calls(monkeypatch):
    """Replace the recover call the CLI makes; returns the calls and lets a test set the
    report (or an exception) it gives."""
    calls = SimpleNamespace(args=[], result=_report())

    def fake_recover(url, **kwargs):
        calls.args.append((url, kwargs))
        if isinstance(calls.result, BaseException):
            raise calls.result
        return calls.result

    monkeypatch.setattr(recovery, "recover", fake_recover)
    return calls


def test_recover_passes_the_connection_and_prints_the_report(monkeypatch, recover_calls):
    monkeypatch.setenv("XASINK_UNIT_PW", SECRET)
    recover_calls.result = _report(
        BranchAction(JOB, 0, 1, "commit", "decided"),
        BranchAction(JOB, 1, 0, "left", "job running, heartbeat 3s ago < grace 120s"),
        BranchAction(JOB, -1, -1, "committed", "every winner committed"),
    )
    status, out, err = run(
        [
            "recover",
            "--url",
            URL,
            "--user",
            "app",
            "--password-env",
            "XASINK_UNIT_PW",
            "--table",
            "public.events",
            "--grace",
            "30",
            "--journal-schema",
            "ops",
        ]
    )
    assert (status, err) == (1, "")  # one action left in doubt
    assert out == (
        "journal in the default schema, tag a1b2c3d4\n"
        f"job={JOB} partition=0 attempt=1 action=commit (decided)\n"
        f"job={JOB} partition=1 attempt=0 action=left (job running, heartbeat 3s ago < grace "
        "120s)\n"
        f"job={JOB} action=committed (every winner committed)\n"
        "2 branch(es) of 1 job(s) handled, 1 action(s) left unresolved\n"
    )
    assert recover_calls.args == [
        (
            Database(URL, user="app", password=SECRET, journal_schema="ops"),
            {
                "table": "public.events",
                "job": None,
                "dry_run": False,
                "grace": 30.0,
                "lock_wait_timeout": 60.0,
                "presume_abort_tag": None,
                "participants": [],
                "run_statements": False,
            },
        )
    ]


def test_recover_dry_run_and_json(recover_calls):
    recover_calls.result = _report(BranchAction(JOB, 0, 1, "commit", "decided"))
    status, out, _ = run(["recover", "--url", URL, "--dry-run"])
    assert status == 0
    assert out.endswith(
        "1 branch(es) of 1 job(s) handled, 0 action(s) left unresolved (dry run: nothing changed)\n"
    )
    status, out, _ = run(["recover", "--url", URL, "--json"])
    assert status == 0
    assert json.loads(out) == {
        "dry_run": False,
        "journal": "journal in the default schema, tag a1b2c3d4",
        "ok": True,
        "actions": [
            {"job_id": JOB, "partition": 0, "attempt": 1, "action": "commit", "detail": "decided"}
        ],
    }


def test_an_xasink_error_is_one_line_on_stderr(recover_calls):
    recover_calls.result = PreflightError("Cannot reach the database at db:5432 (refused).")
    status, out, err = run(["recover", "--url", URL])
    assert (status, out) == (2, "")
    assert err == "xasink: Cannot reach the database at db:5432 (refused).\n"


def test_an_unexpected_error_is_masked_and_has_no_traceback(monkeypatch, recover_calls):
    monkeypatch.setenv("XASINK_UNIT_PW", SECRET)
    recover_calls.result = RuntimeError(
        f"login as app/{SECRET} failed at jdbc:mysql://app:other@db/app?password=third"
    )
    status, out, err = run(["recover", "--url", URL, "--password-env", "XASINK_UNIT_PW"])
    assert (status, out) == (2, "")
    assert err == (
        "xasink: unexpected error: RuntimeError: login as app/*** failed at "
        "jdbc:mysql://app:***@db/app?password=***\n"
    )


@pytest.mark.parametrize("error", [RuntimeError, PreflightError])
def test_a_participants_password_is_masked_in_every_error(monkeypatch, recover_calls, error):
    monkeypatch.setenv("XASINK_UNIT_PW", "own-pw")
    monkeypatch.setenv("XASINK_UNIT_PART_PW", SECRET)
    recover_calls.result = error(f"participant login app/{SECRET} refused")
    argv = ["recover", "--url", URL, "--password-env", "XASINK_UNIT_PW"]
    argv += ["--participant", "jdbc:mariadb://p/app", "--participant-password-env"]
    status, out, err = run([*argv, "XASINK_UNIT_PART_PW"])
    assert (status, out) == (2, "")
    assert SECRET not in err and "participant login app/*** refused" in err


# -- a password given inline is refused, never echoed -------------------------------------
def _refused(capsys, argv):
    """The command's refusal: exit 2, nothing on stdout; returns stderr."""
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's
        status = exc.code
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    return captured.err


@pytest.mark.parametrize(
    ("given", "instead"),
    [
        (["--password", SECRET], "--password-env VAR"),
        ([f"--password={SECRET}"], "--password-env VAR"),
        (
            ["--participant", "jdbc:mariadb://p/app", "--participant-password", SECRET],
            "--participant-password-env VAR",
        ),
    ],
)
def test_a_password_on_the_command_line_is_refused_without_echoing_it(
    capsys, recover_calls, given, instead
):
    """`--password` is a natural guess: argparse took it for an abbreviation of
    `--password-env`, and printed the password as a variable that is not set."""
    err = _refused(capsys, ["recover", "--url", URL, *given])
    assert SECRET not in err
    assert f"pass it through {instead}" in err


@pytest.mark.parametrize(
    "given",
    [
        ["--pass", SECRET],
        ["--passw", SECRET],
        [f"--pass={SECRET}"],
        ["--pwd", SECRET],
        ["--participant", "jdbc:mariadb://p/app", "--participant-pass", SECRET],
    ],
)
def test_no_option_is_abbreviated_and_a_password_like_ones_value_is_not_echoed(
    capsys, recover_calls, given
):
    err = _refused(capsys, ["recover", "--url", URL, *given])
    assert SECRET not in err
    assert "unrecognized arguments: " in err and "***" in err


def test_an_abbreviated_option_is_not_taken(capsys, recover_calls):
    err = _refused(capsys, ["recover", "--url", URL, "--dry"])
    assert "unrecognized arguments: --dry" in err


@pytest.mark.parametrize("option", ["--password-env", "--participant-password-env"])
def test_a_password_env_value_that_is_no_variable_name_is_not_echoed(capsys, recover_calls, option):
    given = [option, SECRET]
    if option != "--password-env":
        given = ["--participant", "jdbc:mariadb://p/app", *given]
    err = _refused(capsys, ["recover", "--url", URL, *given])
    assert SECRET not in err
    assert f"argument {option}: takes the name of an environment variable" in err


def test_recover_masks_its_participants_passwords_in_a_java_error(monkeypatch):
    """`xasink.recover`, called as the public function is: the passwords are inside
    `Database` values (its own and each participant's, properties and URLs too)."""
    import jaydebeapi

    import xasink
    from xasink import operations
    from xasink.errors import XasinkError

    secrets = [SECRET, "part-pw-456", "prop-pw-789", "url-pw-012"]

    def failing(database):
        raise jaydebeapi.DatabaseError(f"logins {' '.join(secrets)} failed")

    monkeypatch.setattr(operations, "make_spec", failing)
    participants = [
        Database("jdbc:mariadb://p/app", user="app", password=secrets[1]),
        Database("jdbc:mariadb://q/app", properties={"pwd": secrets[2]}),
        f"jdbc:postgresql://r/app?user=app&password={secrets[3]}",
    ]
    with pytest.raises(XasinkError) as raised:
        xasink.recover(Database(URL, user="app", password=SECRET), participants=participants)
    text = str(raised.value)
    assert not [s for s in secrets if s in text], text
    assert "logins *** *** *** *** failed" in text


def test_jobs_prints_a_table_and_exits_1_when_something_blocks(monkeypatch):
    listed = [
        SimpleNamespace(
            job_id=JOB,
            state="committing",
            mode="upsert",
            rows=0,
            rows_decided=1200,
            lost_partitions=(),
            age_seconds=5400.0,
            table="public.events",
            sink_id="orders",
            batch_id=7,
            blocker="waits for job ffff",
            resolution="",
        ),
        SimpleNamespace(
            job_id="f" * 32,
            state="committed",
            mode="append",
            rows=None,
            rows_decided=None,
            lost_partitions=(),
            age_seconds=None,
            table="public.t",
            sink_id=None,
            batch_id=None,
            blocker="",
            resolution="",
        ),
        SimpleNamespace(
            job_id="e" * 32,
            state="abandoned",
            mode="append",
            rows=300000,
            rows_decided=400000,
            lost_partitions=(0,),
            age_seconds=60.0,
            table="public.big",
            sink_id=None,
            batch_id=None,
            blocker="",
            resolution="committing -> abandoned by `xasink resolve --abandon`",
        ),
    ]
    seen = {}

    @contextlib.contextmanager
    def operate(database, **kwargs):
        seen["url"] = database.url
        seen["staged"] = kwargs["staged"]
        yield "conn", "journal", "ops"

    def list_jobs(ops, conn, journal, *, states, table, limit):
        seen["query"] = (ops, conn, journal, states, table, limit)
        return listed

    monkeypatch.setattr(journal, "operate", operate)
    monkeypatch.setattr(journal, "list_jobs", list_jobs)
    status, out, err = run(["jobs", "--url", URL, "--state", "committing", "--limit", "5"])
    assert (status, err) == (1, "")
    assert seen == {
        "url": URL,
        "staged": STAGED_APPLY,
        "query": ("ops", "conn", "journal", ("committing",), None, 5),
    }
    assert out.splitlines() == [
        f"{'job':32}  state       mode             rows       age  table / blocker",
        f"{JOB}  committing  upsert              0      1.5h  public.events",
        f"{'':32}  -> sink orders batch 7",
        f"{'':32}  -> 0 of 1200 decided rows are in the table",
        f"{'':32}  -> waits for job ffff",
        f"{'f' * 32}  committed   append              -         -  public.t",
        f"{'e' * 32}  abandoned   append         300000      1.0m  public.big",
        f"{'':32}  -> 300000 of 400000 decided rows are in the table; 1 winning branch(es) "
        "lost, partition(s) [0]",
        f"{'':32}  -> committing -> abandoned by `xasink resolve --abandon`",
    ]


def test_recover_prints_each_action_once(monkeypatch, capfd):
    """Each action once: recovery logs its actions on their own logger, which a library's
    handlers still get; the command line, which prints them as its report, leaves that
    logger out of its log on stderr."""
    from xasink.protocol.actions import RECOVERY_LOGGER, BranchAction, log_action

    assert RECOVERY_LOGGER == cli.REPORTED
    lost = BranchAction(JOB, 1, 4, "LOST", "decided for commit, but rolled back")

    def fake_recover(url, **kwargs):
        log_action(lost)
        logging.getLogger("xasink").warning("xasink: something else worth a look")
        return _report(lost)

    monkeypatch.setattr(recovery, "recover", fake_recover)
    root = logging.getLogger()
    kept, level = root.handlers[:], root.level
    root.handlers[:] = []  # as in a process of its own: main() sets the log up
    try:
        assert main(["recover", "--url", URL]) == 1
    finally:
        root.handlers[:], root.level = kept, level
    out, err = capfd.readouterr()
    assert out.count("action=LOST") == 1 and "action=LOST" not in err, (out, err)
    assert "something else worth a look" in err


def test_session_init_reaches_the_commands_database(monkeypatch):
    """`--session-init` gives the command's connections the writers' statements (after
    `SET ROLE`, PostgreSQL lets only that role finish a branch it prepared)."""
    args = parse(["recover", "--url", URL, "--session-init", "SET ROLE w", "--session-init", "x"])
    assert common.database(args).session_init == ("SET ROLE w", "x")
