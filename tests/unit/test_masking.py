"""Secrets stay out of messages: URL masking, the Redactor, and the reprs of the specs."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import jaydebeapi
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

import xasink
from xasink.errors import ConfigurationError, XasinkError
from xasink.masking import MASK, Redactor, mask_url
from xasink.protocol import health
from xasink.spark import datasource
from xasink.spark import write as spark_write
from xasink.spark.options import parse
from xasink.spark.shipping import ship
from xasink.spec import ConnectionSpec, Database, TableRef, properties_tuple

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
        ("jdbc:mysql://h/db?Password=abc;PWD=d", "jdbc:mysql://h/db?Password=***"),
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


# -- a login in the URL (user:password@host) ----------------------------------------------
@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("jdbc:postgresql://app:s3cretPW!@127.0.0.1:57432/app", "s3cretPW!"),
        ("jdbc:mariadb://app:m4riaPW!@127.0.0.1:55306/app", "m4riaPW!"),
        ("jdbc:mysql://app:p@ss:w/rd%@db:3306/app?ssl=true", "p@ss:w/rd%"),
        ("jdbc:mysql://app:p%40ss%3Aw%2Frd%25@db/app", "p%40ss%3Aw%2Frd%25"),
        ("jdbc:mariadb://app:x@h1:3306,h2:3306/app", "app:x"),
        ("jdbc:postgresql://app:Ab?3x@127.0.0.1:44231/db", "Ab?3x"),
        ("jdbc:postgresql://app:Ab;3x@127.0.0.1:44231/db", "Ab;3x"),
        ("jdbc:postgresql://app:Ab#3x/y@127.0.0.1/db", "Ab#3x/y"),
        ("jdbc:postgresql://app@corp:S3CRET@127.0.0.1/db", "S3CRET"),
        ("jdbc:mariadb://app@srv:pw?;x@[::1]:3306/db", "pw?;x"),
    ],
)
def test_a_url_with_a_password_in_its_user_info_is_refused_without_the_password(url, password):
    """Neither pgjdbc nor MariaDB Connector/J reads a login there: each takes it for part of
    the host, and quotes it (password and all) in its error."""
    with pytest.raises(ConfigurationError) as refused:
        Database(url)
    message = str(refused.value)
    assert password not in message and password not in repr(refused.value)
    assert "neither pgjdbc nor MariaDB Connector/J" in message
    assert "Database(url, user, password)" in message and "--password-env" in message


def test_a_url_with_a_user_but_no_password_before_its_host_is_refused_too():
    """Both drivers take `app@127.0.0.1` for the host name, which does not resolve."""
    with pytest.raises(ConfigurationError, match="user@host"):
        Database("jdbc:postgresql://app@127.0.0.1:5432/app")


@pytest.mark.parametrize(
    "url",
    [
        "jdbc:postgresql://srv.example.com:5432/db?user=app@srv&password=p@w&sslmode=require",
        "jdbc:mysql://address=(host=h)(port=3306)/db",
        "jdbc:postgresql://[::1]:5432/db",
        "jdbc:mariadb://h1:3306,h2:3306/db?user=app",
        "jdbc:db2://h:50000/db:user=app@corp;",
        "jdbc:mysql://address=(host=h)(user=app@corp)/db",
        "jdbc:postgresql://h:5432/my@db",
    ],
)
def test_urls_without_user_info_are_taken(url):
    assert Database(url).url == url


def test_a_query_password_is_masked_to_its_end():
    """pgjdbc and MariaDB Connector/J split the query at `&` only: `;` is the password's."""
    assert mask_url("jdbc:postgresql://h/db?password=ab;cd&ssl=true") == (
        "jdbc:postgresql://h/db?password=***&ssl=true"
    )


def test_mask_url_masks_user_info_anywhere_in_a_text():
    """A driver's cause text quotes the host part it failed on, without the `//`."""
    text = "The connection attempt failed. / caused by: app:s3cretPW!@127.0.0.1"
    assert mask_url(text) == "The connection attempt failed. / caused by: app:***@127.0.0.1"
    assert mask_url("(host app:p@ss@db, port 5432)") == "(host app:***@db, port 5432)"
    assert mask_url("jdbc:mysql://u:pw@h/db") == "jdbc:mysql://u:***@h/db"


# -- a secret is masked as a whole token, never inside another word -----------------------
@pytest.mark.parametrize("secret", ["x", "app", "test", "jobs"])
def test_a_short_or_common_password_does_not_mangle_other_words(secret):
    text = 'Check who can write "xasink_jobs" and public.xasink_stage_app_1 of test_db apps'
    assert Redactor([secret])(text) == text


@pytest.mark.parametrize("secret", ["x", "app", "test", "p@ss:w/rd%", "s3cr3t-Pa55word!"])
def test_a_password_standing_as_a_token_is_masked_wherever_it_stands(secret):
    redact = Redactor([secret])
    text = f"pw={secret}&ssl=1 '{secret}' \"{secret}\" u:{secret}@h ({secret}) {secret}."
    assert redact(text) == "pw=***&ssl=1 '***' \"***\" u:***@h (***) ***."


def test_a_password_needing_url_encoding_is_masked_in_its_encoded_forms():
    redact = Redactor(["p@ss:w/rd %"])
    text = "a p%40ss%3Aw%2Frd%20%25 b p%40ss%3Aw%2Frd+%25&c=1 d p@ss:w/rd %"
    assert redact(text) == "a *** b ***&c=1 d ***"


# -- secrets come from the values: Database, ConnectionSpec, URLs ---------------------------
def test_a_database_repr_masks_every_password_like_property():
    db = Database(
        "jdbc:mysql://h/d",
        properties={"pwd": "pw-one", "passwd": "pw-two", "sslPassword": "pw-3", "ssl": "true"},
    )
    shown = repr(db)
    assert not any(pw in shown for pw in ("pw-one", "pw-two", "pw-3"))
    assert "'ssl': 'true'" in shown


def test_a_spec_redacts_its_password_like_properties_and_its_urls_passwords():
    spec = ConnectionSpec(
        "jdbc:mysql://h/d?user=u&password=in-the-query",
        password=SECRET,
        properties=(("pwd", "pw-prop"), ("sslpassword", "key-pw"), ("ssl", "true")),
    )
    text = f"{SECRET} pw-prop key-pw in-the-query true"
    assert spec.redact(text) == "*** *** *** *** true"


# -- no raw Java error leaves a public call with a password in it -----------------------------
PROPERTY_SECRET, QUERY_SECRET = "prop-pw-789", "url-pw-012"


def _java_failure(*args: object, **kwargs: object) -> None:
    raise jaydebeapi.DatabaseError(f"logins {SECRET} {PROPERTY_SECRET} {QUERY_SECRET} failed")


def _database() -> Database:
    url = f"jdbc:postgresql://h/app?user=app&password={QUERY_SECRET}"
    return Database(url, password=SECRET, properties={"sslpassword": PROPERTY_SECRET})


def _format_request(tmp_path, streaming: bool = False):
    jar = tmp_path / "postgresql-42.7.1.jar"
    jar.write_bytes(b"")
    options = {
        "url": f"jdbc:postgresql://h/app?user=app&password={QUERY_SECRET}",
        "dbtable": "t",
        "password": SECRET,
        "sslpassword": PROPERTY_SECRET,
        "xasink.jars": str(jar),
    }
    declared = lambda spec: ["sslpassword"]  # noqa: E731 (the driver's, without a JVM)
    return parse(options, ["id"], overwrite=False, streaming=streaming, driver_properties=declared)


def _write_xa(monkeypatch, tmp_path):
    monkeypatch.setattr(spark_write, "check_write", lambda *args: None)  # no DataFrame here
    monkeypatch.setattr(spark_write, "TransactionSettings", SimpleNamespace(of=_java_failure))
    xasink.write_xa(object(), _database(), "t")


def _check_health(monkeypatch, tmp_path):
    monkeypatch.setattr(health, "journal_session", _java_failure)
    health.check_health(_database())


def _format_mint(monkeypatch, tmp_path):
    monkeypatch.setattr(datasource, "JobTrace", SimpleNamespace(of=_java_failure))
    datasource.mint(_format_request(tmp_path), StructType([StructField("id", LongType())]))


def _format_end_stream_jobs(monkeypatch, tmp_path):
    monkeypatch.setattr(datasource, "open_journal", _java_failure)
    datasource.end_stream_jobs(_format_request(tmp_path, streaming=True))


@pytest.mark.parametrize("call", [_write_xa, _check_health, _format_mint, _format_end_stream_jobs])
def test_every_public_entry_masks_the_passwords_its_values_carry(monkeypatch, tmp_path, call):
    """The passwords are inside the values the public signatures take (a `Database`, a
    FormatRequest): its password, a password-like property and the URL's own."""
    with pytest.raises(XasinkError) as raised:
        call(monkeypatch, tmp_path)
    text = str(raised.value)
    assert not [s for s in (SECRET, PROPERTY_SECRET, QUERY_SECRET) if s in text], text
    assert "logins *** *** *** failed" in text
