"""`schema_mode` (write_xa's keyword, format("xasink")'s `xasink.schemaMode`) is checked
before anything connects, and each refusal says what it takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from xasink import foreach_batch
from xasink.dialects import get_dialect
from xasink.driver.request import JobRequest
from xasink.errors import ConfigurationError, PreflightError
from xasink.masking import Redactor
from xasink.protocol.connecting import make_spec
from xasink.spark.options import parse
from xasink.spec import Database, TableRef, write_options
from xasink.tables import evolution
from xasink.tables.evolution import check_schema_mode
from xasink.tables.modes import ModeOptions
from xasink.tables.new_table import NewTable

URL = "jdbc:postgresql://db:5432/app"
TAKES = re.escape(
    "takes 'merge' (add the DataFrame's columns that the table lacks, as nullable columns)"
)


@pytest.mark.parametrize("value", ["merge", None])
def test_merge_or_nothing(value):
    assert check_schema_mode(value) == value


@pytest.mark.parametrize("value", ["overwrite", "Merge", "", "true", 1])
def test_anything_else_is_refused_saying_what_it_takes(value):
    got = re.escape(repr(value))
    with pytest.raises(ConfigurationError, match=rf"^schema_mode {TAKES}.*got {got}\.$"):
        check_schema_mode(value)


def test_it_is_a_write_keyword_and_a_request_checks_it(tmp_path: Path):
    assert write_options("write_xa", {"schema_mode": "merge"}) == {"schema_mode": "merge"}
    jar = tmp_path / "postgresql-42.7.3.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))
    spec = make_spec(Database(URL, jars=[str(jar)]))
    options = ModeOptions.build("append", None, None, None, None, ["id"])
    assert JobRequest(spec, TableRef("t"), options, schema_mode="merge").schema_mode == "merge"
    with pytest.raises(ConfigurationError, match="schema_mode takes 'merge'"):
        JobRequest(spec, TableRef("t"), options, schema_mode="add")  # type: ignore[arg-type]


def test_a_stream_with_a_bad_schema_mode_is_refused_before_it_starts():
    with pytest.raises(ConfigurationError, match="schema_mode takes 'merge'"):
        foreach_batch(URL, "events", sink_id="s", schema_mode="evolve")  # type: ignore[arg-type]


@pytest.fixture
def options(tmp_path: Path) -> dict[str, str]:
    jar = tmp_path / "postgresql-42.7.3.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))
    return {"url": URL, "dbtable": "events", "xasink.jars": str(jar)}


def test_the_format_option(options):
    assert parse(options, ["id"], overwrite=False).request.schema_mode is None
    given = {**options, "xasink.schemaMode": "merge"}
    assert parse(given, ["id"], overwrite=False).request.schema_mode == "merge"
    with pytest.raises(ConfigurationError, match=f"^Option 'xasink.schemaMode' {TAKES}"):
        parse({**options, "xasink.schemamode": "overwrite"}, ["id"], overwrite=False)
    with pytest.raises(ConfigurationError, match=r"Did you mean 'xasink\.schemaMode'"):
        parse({**options, "xasink.schemaMod": "merge"}, ["id"], overwrite=False)


def test_column_types_also_type_the_added_columns_so_they_need_no_created_table():
    types = {"extra": "VARCHAR(40)"}
    added = NewTable.build(None, types, ["id", "extra"], "never", evolving=True)
    assert added.type_of("extra") == "VARCHAR(40)"
    with pytest.raises(ConfigurationError, match=r"or let it add columns \(schema_mode='merge'\)"):
        NewTable.build(None, types, ["id", "extra"], "never")
    with pytest.raises(ConfigurationError, match="create='never' creates none"):
        NewTable.build("WITH (fillfactor=70)", None, ["id"], "never", evolving=True)


def test_a_denied_add_whose_grant_lookup_fails_is_still_the_refusal(monkeypatch):
    """The GRANT named in the refusal is looked up on the server: where that fails too, the
    refusal stands with a generic grant, not the lookup's error."""

    def denied(conn: object, sql: str) -> int:
        raise RuntimeError("permission denied for table events")

    def lookup(*args: object) -> str:
        raise RuntimeError("connection lost while reading pg_class")

    monkeypatch.setattr(evolution, "execute", denied)
    monkeypatch.setattr(evolution, "is_denied", lambda exc: True)
    monkeypatch.setattr(evolution, "alter_grant", lookup)
    schema = StructType([StructField("extra", StringType())])
    with pytest.raises(PreflightError, match="may not alter the table") as refused:
        evolution.add_columns(
            None,  # type: ignore[arg-type]
            get_dialect("postgres"),
            TableRef("events"),
            schema,
            ModeOptions(),
            ["extra"],
            new_table=NewTable(),
            lock_wait=1.0,
            redact=Redactor(),
            user="app",
        )
    message = str(refused.value)
    assert "connection lost" not in message and "ALTER TABLE" in message, message
    assert '"app"' in message and "Nothing was written" in message, message
