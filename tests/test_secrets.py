"""No entry prints a password. A login in the URL (`jdbc:...://app:PASSWORD@host/db`, the
libpq and SQLAlchemy habit) is refused before anything connects or is written: neither
pgjdbc nor MariaDB Connector/J reads it, and each quoted it, password and all, in its error.
Through every public entry (write_xa, transaction, tx.write's participant, recover and its
participants, check_health, format("xasink"), the CLI): the password is in no message, no
exception of the chain, no repr, no log line."""

from __future__ import annotations

import io
import logging
import traceback

import pytest
from support import assert_clean, assert_exactly, database_of, events_df, new_table, run_script

from xasink import ConfigurationError, Database, recover, transaction, write_xa
from xasink.cli import main
from xasink.protocol.health import check_health


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG, logger="xasink")
    return caplog


def in_url(db) -> str:
    """The server's URL with its login before the host, as a libpq user writes it."""
    scheme, rest = db.jdbc_url.split("//", 1)
    return f"{scheme}//{db.user}:{db.password}@{rest}"


def chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def assert_refused_without_the_password(exc: BaseException, logs, db, table: str) -> None:
    shown = "".join(traceback.format_exception(exc)) + " ".join(repr(e) for e in chain(exc))
    assert db.password not in shown, shown
    assert db.password not in logs.text, logs.text
    assert isinstance(exc, ConfigurationError), shown
    message = str(exc)
    assert "neither pgjdbc nor MariaDB Connector/J" in message, message
    assert "Database(url, user, password)" in message, message
    assert_exactly(db, table, [])  # refused before anything was written
    assert_clean(db)


@pytest.mark.ci_one_server
def test_write_xa_refuses_a_login_in_the_url(spark, db, logs):
    table = new_table(db)
    df = events_df(spark, 10, 2)
    for call in (
        lambda: write_xa(df, Database(in_url(db), dialect=db.dialect), table),
        lambda: write_xa(df, in_url(db), table),
    ):
        with pytest.raises(Exception) as raised:
            call()
        assert_refused_without_the_password(raised.value, logs, db, table)


@pytest.mark.ci_one_server
def test_a_transaction_refuses_a_login_in_the_url_of_either_database(spark, db, logs):
    table = new_table(db)
    df = events_df(spark, 10, 2)
    with pytest.raises(Exception) as raised, transaction(in_url(db)) as tx:
        tx.write(df, table)
    assert_refused_without_the_password(raised.value, logs, db, table)
    with pytest.raises(Exception) as raised, transaction(database_of(db)) as tx:
        tx.write(df, table)
        tx.write(df, table, database=in_url(db))
    assert_refused_without_the_password(raised.value, logs, db, table)


@pytest.mark.ci_one_server
def test_recover_and_check_refuse_a_login_in_the_url(db, logs):
    table = new_table(db)
    for call in (
        lambda: recover(in_url(db)),
        lambda: recover(database_of(db), participants=[in_url(db)]),
        lambda: check_health(in_url(db)),
    ):
        with pytest.raises(Exception) as raised:
            call()
        assert_refused_without_the_password(raised.value, logs, db, table)


@pytest.mark.ci_one_server
def test_format_refuses_a_login_in_the_url(spark, db, logs):
    table = new_table(db)
    writer = events_df(spark, 10, 2).write.format("xasink").mode("append")
    with pytest.raises(Exception) as raised:
        writer.option("url", in_url(db)).option("dbtable", table).save()
    shown = "".join(traceback.format_exception(raised.value))
    assert db.password not in shown and db.password not in logs.text, shown
    assert "neither pgjdbc nor MariaDB Connector/J" in shown, shown
    assert_exactly(db, table, [])
    assert_clean(db)


def xasink(*argv: str) -> tuple[int, str]:
    """The command in this process, given no password but in its URLs: (exit, output)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        code = main(list(argv), out=out, err=err)
    except SystemExit as exc:  # argparse refused the arguments
        code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("command", ["jobs", "check", "recover"])
@pytest.mark.ci_one_server
def test_the_cli_refuses_a_login_in_the_url(db, command, capsys):
    code, printed = xasink(command, "--url", in_url(db))
    printed += "".join(capsys.readouterr())
    assert code == 2 and db.password not in printed, printed
    assert "neither pgjdbc nor MariaDB Connector/J" in printed, printed
    assert "--password-env" in printed, printed


@pytest.mark.ci_one_server
def test_the_cli_refuses_a_login_in_a_participants_url(db, capsys, monkeypatch):
    monkeypatch.setenv("XASINK_TEST_OWN_PASSWORD", db.password)
    argv = ["recover", "--url", db.jdbc_url, "--user", db.user]
    argv += ["--password-env", "XASINK_TEST_OWN_PASSWORD", "--participant", in_url(db)]
    code, printed = xasink(*argv)
    printed += "".join(capsys.readouterr())
    assert code == 2 and db.password not in printed, printed
    assert "neither pgjdbc nor MariaDB Connector/J" in printed, printed


REFUSING_DRIVER = """
import sys
from support import events_df, spark_builder
from xasink import write_xa
url, table, events = sys.argv[1:4]
spark = (
    spark_builder("secrets-in-url")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", events)
    .config("spark.eventLog.compress", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("INFO")
df = events_df(spark, 10, 2)
writer = df.write.format("xasink").mode("append").option("url", url).option("dbtable", table)
for name, write in (("format", writer.save), ("write_xa", lambda: write_xa(df, url, table))):
    try:
        write()
    except Exception as exc:
        print("REFUSED", name, exc)
spark.stop()
"""


@pytest.mark.ci_postgres
def test_no_output_of_a_driver_process_holds_a_password_given_in_the_url(db, tmp_path):
    """Spark's INFO logs and event log, and what the driver prints, with format("xasink")
    and write_xa refusing the URL."""
    table, events = new_table(db), tmp_path / "events"
    events.mkdir()
    done = run_script(REFUSING_DRIVER, in_url(db), table, str(events))
    assert done.returncode == 0, done.stderr[-3000:]
    event_log = "".join(p.read_text() for p in events.rglob("*") if p.is_file())
    for text in (done.stdout, done.stderr, event_log):
        assert db.password not in text
    assert "REFUSED format" in done.stdout and "REFUSED write_xa" in done.stdout, done.stdout
    assert done.stdout.count("neither pgjdbc nor MariaDB Connector/J") >= 2, done.stdout
    assert_exactly(db, table, [])
    assert_clean(db)
