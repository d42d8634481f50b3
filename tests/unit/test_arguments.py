"""A wrong kind of argument to an entry point is a TypeError that says what was given and
what goes there, raised before anything connects: a pandas frame, a dict of properties,
the database and the table swapped, no table."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import pytest

from xasink import CommitProperties, Database, foreach_batch, transaction, write_xa
from xasink.driver.transaction import TransactionSettings
from xasink.spark.transaction import Transaction

SECRET = "s3cr3t-pw"
URL = "jdbc:postgresql://127.0.0.1:9/app"
WRITE_XA = "write_xa(df, database, table)"


@pytest.fixture
def db(tmp_path) -> Database:
    """A database nothing connects to, whose jar need not be looked for."""
    jar = tmp_path / "postgresql.jar"
    jar.write_bytes(b"")
    return Database(URL, user="app", password=SECRET, jars=[str(jar)])


def refused(message: str) -> Any:
    return pytest.raises(TypeError, match=f"^{re.escape(message)}$")


def test_a_pandas_frame_is_refused_with_the_call_that_converts_it(db):
    pdf = pd.DataFrame({"id": [1, 2]})
    expected = "takes a PySpark DataFrame; got a pandas DataFrame: pass spark.createDataFrame"
    with refused(f"{WRITE_XA} {expected}(pdf) instead."):
        write_xa(pdf, db, "t")
    with refused(f"tx.write(df, table) {expected}(pdf) instead."):
        Transaction(TransactionSettings.of(db, None)).write(pdf, "t")
    with refused(f"{WRITE_XA} takes a PySpark DataFrame; got a list."):
        write_xa([(1,)], db, "t")


def test_swapped_database_and_table_say_so(db):
    with refused(
        f"{WRITE_XA} takes the database before the table: got the table name 'users_b' "
        "where the database goes and a Database where the table goes. Swap them."
    ):
        write_xa(pd.DataFrame(), "users_b", db)  # type: ignore[arg-type]
    url = f"jdbc:postgresql://app:{SECRET}@db/app"
    with pytest.raises(TypeError) as error:
        write_xa(pd.DataFrame(), "users_b", url)
    assert "got the table name 'users_b' where the database goes and a JDBC URL where" in str(
        error.value
    )
    assert SECRET not in str(error.value)
    with refused(
        "foreach_batch(database, table) takes the database before the table: got the table "
        "name 'events' where the database goes and a Database where the table goes. Swap them."
    ):
        foreach_batch("events", db, sink_id="s")  # type: ignore[arg-type]


def test_a_table_that_is_no_name_is_refused(db):
    kinds = "takes the table as 'name', 'schema.name' or ('schema', 'name'); got"
    with refused(f"{WRITE_XA} {kinds} None."):
        write_xa(pd.DataFrame(), db, None)  # type: ignore[arg-type]
    with refused(f"foreach_batch(database, table) {kinds} an int."):
        foreach_batch(db, 5, sink_id="s")  # type: ignore[arg-type]


def test_properties_given_as_a_dict_name_the_class_that_takes_them(db):
    with refused(
        f"{WRITE_XA} takes writer_properties as a xasink.WriterProperties; got a dict: pass "
        "writer_properties=xasink.WriterProperties(bulk=False)."
    ):
        write_xa(pd.DataFrame(), db, "t", writer_properties={"bulk": False})  # type: ignore[typeddict-item]
    retries = "commit_properties=xasink.CommitProperties(retries=2)."
    with refused(
        f"{WRITE_XA} takes commit_properties as a xasink.CommitProperties; got a dict: pass "
        f"{retries}"
    ):
        write_xa(pd.DataFrame(), db, "t", commit_properties={"retries": 2})  # type: ignore[arg-type]
    with (
        refused(
            "xasink.transaction(database) takes commit_properties as a "
            f"xasink.CommitProperties; got a dict: pass {retries}"
        ),
        transaction(db, commit_properties={"retries": 2}),  # type: ignore[arg-type]
    ):
        pass
    with refused("foreach_batch takes writer_properties as a xasink.WriterProperties; got a str."):
        foreach_batch(db, "t", sink_id="s", writer_properties="bulk")  # type: ignore[typeddict-item]
    assert callable(foreach_batch(db, "t", sink_id="s", commit_properties=CommitProperties()))
