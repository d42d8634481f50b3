"""Secrets stay out of messages: URL masking, the Redactor, and the reprs of the specs."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from xasink.errors import ConfigurationError
from xasink.masking import MASK, Redactor, mask_url
from xasink.spark.shipping import ship
from xasink.spec import ConnectionSpec, TableRef, properties_tuple

SECRET = "s3cr3t-Pa55word!"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "jdbc:postgresql://h/db?user=u&password=p%40ss&ssl=true",
            "jdbc:postgresql://h/db?user=u&password=***&ssl=true",
        ),
        ("jdbc:postgresql://h/db?password=", "jdbc:postgresql://h/db?password=***"),
        (
            "jdbc:postgresql://h/db?sslpassword=k&passwordless=1",
            "jdbc:postgresql://h/db?sslpassword=***&passwordless=1",
        ),
        ("jdbc:mysql://u:pw@h:3306/db", "jdbc:mysql://u:***@h:3306/db"),
        (
            "jdbc:mariadb://u:pw@h1:3306,h2:3306/db?pwd=x",
            "jdbc:mariadb://u:***@h1:3306,h2:3306/db?pwd=***",
        ),
        ("jdbc:mysql://h/db?Password=abc;PWD=d", "jdbc:mysql://h/db?Password=***;PWD=***"),
        ("jdbc:mysql://h/db?trustStorePassword=t", "jdbc:mysql://h/db?trustStorePassword=***"),
        (
            "jdbc:sqlserver://h;user=u;password=x;db=d",
            "jdbc:sqlserver://h;user=u;password=***;db=d",
        ),
        ("jdbc:mysql://u@h/db", "jdbc:mysql://u@h/db"),
        ("jdbc:postgresql://h:5432/db", "jdbc:postgresql://h:5432/db"),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


@pytest.mark.parametrize("url", ["jdbc:mysql://u:p/w@h/db", "jdbc:mysql://u:p@ss@h/db"])
def test_mask_url_hides_a_whole_user_info_password(url):
    masked = mask_url(url)
    assert "p/w" not in masked and "ss@" not in masked


def test_redactor_hides_plain_and_url_encoded_secrets_and_masks_urls():
    redact = Redactor([SECRET, None, ""])
    text = (
        f"login {SECRET} failed for jdbc:x://h/d?password=s3cr3t-Pa55word%21 "
        "(form s3cr3t-Pa55word%21) user=jdbc:mysql://u:other@h/db"
    )
    assert redact(text) == (
        "login *** failed for jdbc:x://h/d?password=*** (form ***) user=jdbc:mysql://u:***@h/db"
    )


def test_redactor_knows_both_url_encodings_of_a_space():
    redact = Redactor(["a b&c"])
    assert redact("x a+b%26c y a%20b%26c z a b&c") == "x *** y *** z ***"


def test_redactor_replaces_a_longer_secret_whole():
    assert Redactor(["pw", "pw-long"])("pw-long and pw") == "*** and ***"


def test_redactor_takes_any_object_and_without_secrets_still_masks_urls():
    error = RuntimeError("jdbc:postgresql://h/d?password=zzz")
    assert Redactor()(error) == "jdbc:postgresql://h/d?password=***"
    assert Redactor([None])(42) == "42"
    assert MASK == "***"


def test_spec_repr_and_str_show_no_password():
    spec = ConnectionSpec("jdbc:postgresql://h/d?password=inurl", "u", SECRET, dialect="postgres")
    shown = "ConnectionSpec(url='jdbc:postgresql://h/d?password=***', user='u', dialect='postgres')"
    assert repr(spec) == shown
    assert str(spec) == shown
    assert f"{spec!r} {spec}" == f"{shown} {shown}"
    assert spec.masked_url == "jdbc:postgresql://h/d?password=***"
    assert spec.redact(f"auth failed for {SECRET}") == "auth failed for ***"


def test_spec_repr_masks_user_info_and_keeps_the_password_for_the_executors():
    spec = ConnectionSpec("jdbc:mysql://u:inurl@h/d", "u", SECRET, dialect="mysql")
    assert "inurl" not in repr(spec) and SECRET not in repr(spec)
    assert pickle.loads(pickle.dumps(spec)).password == SECRET


def test_spec_with_defaults_lets_the_callers_properties_win():
    spec = ConnectionSpec("jdbc:postgresql://h/d", properties=(("ssl", "true"),))
    merged = spec.with_defaults((("ssl", "false"), ("allowLocalInfile", "true")))
    assert merged.properties == (("allowLocalInfile", "true"), ("ssl", "true"))
    assert spec.with_defaults((("ssl", "false"),)) is spec


def test_properties_tuple_stringifies_in_order():
    assert properties_tuple({"a": 1, "b": True}) == (("a", "1"), ("b", "True"))
    assert properties_tuple(None) == ()


@pytest.mark.parametrize(
    ("given", "expected", "text"),
    [
        ("t", TableRef("t"), "t"),
        ("s.t", TableRef("t", "s"), "s.t"),
        ("s.t.u", TableRef("t.u", "s"), "s.t.u"),
        (("s.x", "t.y"), TableRef("t.y", "s.x"), "s.x.t.y"),
        (["t"], TableRef("t"), "t"),
        ('we"ird', TableRef('we"ird'), 'we"ird'),
    ],
)
def test_table_names_parse(given, expected, text):
    table = TableRef.parse(given)
    assert table == expected
    assert str(table) == text


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "Table must be 'name', 'schema.name' or ('schema', 'name'); got ''."),
        (".t", "Table must be 'name', 'schema.name' or ('schema', 'name'); got '.t'."),
        ("s.", "Table must be 'name', 'schema.name' or ('schema', 'name'); got 's.'."),
        (
            ("a", "b", "c"),
            "Table must be 'name', 'schema.name' or ('schema', 'name'); got ('a', 'b', 'c').",
        ),
        (("s", 1), "Table must be 'name', 'schema.name' or ('schema', 'name'); got ('s', 1)."),
        ("a\x00b", "Table and schema names cannot contain NUL characters."),
    ],
)
def test_bad_table_names_are_configuration_errors(given, message):
    with pytest.raises(ConfigurationError) as caught:
        TableRef.parse(given)
    assert str(caught.value) == message


def test_table_ref_repr_is_its_fields():
    assert repr(TableRef("t", "s")) == "TableRef(name='t', schema='s')"


def test_a_shipped_partitions_repr_shows_its_row_count_and_none_of_its_rows():
    """A message may reach a log line (an error, a debugger): the rows are the user's."""
    batch = pa.RecordBatch.from_pydict({"card": ["4111-1111-1111-1111"]})
    shipment = ship([batch], partition=0, attempt=7)
    assert shipment.rows is not None and b"4111-1111-1111-1111" in shipment.rows
    shown = repr(shipment)
    assert "4111" not in shown and "rows=1" in shown
