"""format("xasink")'s options read into a job request (no Spark, no server: the driver jar
is a fake file passed explicitly, so nothing searches the disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xasink.errors import ConfigurationError, DriverNotFoundError
from xasink.protocol import sessions
from xasink.protocol.connecting import make_spec
from xasink.spark.options import parse
from xasink.spec import CommitProperties, Database, TableRef, WriterProperties

URL = "jdbc:postgresql://db:5432/app"


@pytest.fixture
def jar(tmp_path: Path) -> str:
    path = tmp_path / "postgresql-42.7.3.jar"
    path.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: never opened here
    return str(path)


@pytest.fixture
def options(jar: str) -> dict[str, str]:
    return {"url": URL, "dbtable": "public.events", "xasink.jars": jar}


def parse_error(options: dict[str, str], columns=("id", "v"), **kwargs) -> str:
    with pytest.raises(ConfigurationError) as caught:
        parse(options, list(columns), overwrite=kwargs.pop("overwrite", False), **kwargs)
    return str(caught.value)


def test_defaults(options, jar):
    parsed = parse(options, ["id", "v"], overwrite=False)
    request = parsed.request
    assert request.spec.url == URL
    assert request.spec.dialect == "postgres"
    assert request.spec.jars == (str(Path(jar).resolve()),)
    assert (request.spec.user, request.spec.password, request.spec.properties) == (None, None, ())
    assert (request.spec.connect_timeout, request.spec.network_timeout) == (10, 600.0)
    assert request.target == TableRef("events", "public")
    assert (request.options.mode, request.options.key) == ("append", ())
    assert (request.create, request.writer) == ("if_missing", WriterProperties(10_000, True))
    assert request.commit == CommitProperties(
        retries=5, parallelism=4, recover_first=True, grace=120.0, lock_wait_timeout=60.0
    )
    assert request.journal_schema is None
    assert parsed.max_branches == 8  # PostgreSQL's bound on prepared slots
    assert (parsed.heartbeat_interval, parsed.lease, parsed.start_timeout) == (10.0, 300.0, 3600.0)
    assert (parsed.sink_id, parsed.stream_key) == (None, None)


def test_spark_save_mode_overwrite(options):
    assert parse(options, ["id"], overwrite=True).request.options.mode == "overwrite"


def test_keys_are_case_insensitive_and_numbers_parse(jar):
    parsed = parse(
        {
            "URL": "jdbc:mysql://db/app",
            "DbTable": "events",
            "XASINK.JARS": jar,
            "xasink.Mode": "upsert",
            "Key": "id, name",
            "xasink.order": "ts",
            "batchSize": "500",
            "numPartitions": "3",
            "xasink.connectTimeout": "4",
            "xasink.lockWaitTimeout": "1.5",
            "xasink.grace": "30",
            "xasink.bulk": "FALSE",
            "xasink.recoverFirst": "false",
            "xasink.commitParallelism": "2",
            "xasink.heartbeatInterval": "2.5",
            "xasink.journalSchema": "ops",
        },
        ["id", "name", "ts", "v"],
        overwrite=False,
    )
    request = parsed.request
    assert request.spec.dialect == "mysql"
    assert request.target == TableRef("events")
    assert request.options.key == ("id", "name")
    assert (request.options.mode, request.options.order) == ("upsert", "ts")
    assert (request.writer.batch_size, request.spec.connect_timeout) == (500, 4)
    assert (request.commit.lock_wait_timeout, request.commit.grace) == (1.5, 30.0)
    assert (request.writer.bulk, request.commit.recover_first) == (False, False)
    assert (request.commit.parallelism, request.journal_schema) == (2, "ops")
    assert (parsed.max_branches, parsed.heartbeat_interval) == (3, 2.5)


def test_mysql_has_no_default_branch_bound(options):
    options["url"] = "jdbc:mariadb://db/app"
    assert parse(options, ["id"], overwrite=False).max_branches is None


def test_other_options_are_driver_properties_credentials_are_not(options):
    options.update(
        {
            "user": "app",
            "password": "hunter2",
            "sslmode": "require",
            "driver": "org.postgresql.Driver",
            "path": "/ignored",
            "checkpointLocation": "/ckpt",
            "batchsize": "10",
            "key": "id",
            "xasink.mode": "upsert",
        }
    )
    spec = parse(options, ["id", "v"], overwrite=False, driver_properties=declared).request.spec
    assert (spec.user, spec.password) == ("app", "hunter2")
    assert spec.properties == (("sslmode", "require"),)


def test_nothing_shows_the_password(options):
    options.update({"url": URL + "?password=inurl", "password": "hunter2"})
    shown = repr(parse(options, ["id"], overwrite=False, streaming=True))
    assert "hunter2" not in shown and "inurl" not in shown
    assert "url='jdbc:postgresql://db:5432/app?password=***'" in shown


def test_the_stream_key_names_the_stream_and_hashes_no_secret(options):
    options.update({"checkpointLocation": "/ckpt/q1", "queryName": "q1"})
    key = parse(options, ["id"], overwrite=False, streaming=True).stream_key
    # Pinned: sha256 of the JSON list [masked URL, dbtable, checkpoint, query name, sink id,
    # mode]; a writer must find the jobs an earlier version of it minted for its stream.
    assert key == "c3b51564c1d615c65d075ea5500b908d"
    same = {**options, "url": URL, "password": "other", "user": "someone"}
    assert parse(same, ["id"], overwrite=False, streaming=True).stream_key == key
    secret_in_url = {**options, "url": URL + "?password=a"}
    other_secret = {**options, "url": URL + "?password=b"}
    assert (
        parse(secret_in_url, ["id"], overwrite=False, streaming=True).stream_key
        == parse(other_secret, ["id"], overwrite=False, streaming=True).stream_key
    )
    elsewhere = {**options, "checkpointLocation": "/ckpt/q2"}
    assert parse(elsewhere, ["id"], overwrite=False, streaming=True).stream_key != key


def test_sink_id_is_validated_at_once(options):
    options["xasink.sinkId"] = "orders-to-pg"
    assert parse(options, ["id"], overwrite=False).sink_id == "orders-to-pg"
    options["xasink.sinkId"] = " padded"
    assert parse_error(options).startswith("sink_id must be 1 to 200 printable ASCII characters")


def test_merge_with_json_op_values(options):
    options.update(
        {
            "xasink.mode": "merge",
            "key": "id",
            "op": "kind",
            "xasink.opValues": '{"insert": ["c", "r"], "update": "u", "delete": "d"}',
        }
    )
    mode = parse(options, ["id", "kind", "v"], overwrite=False).request.options
    assert mode.op_values == (("c", False), ("d", True), ("r", False), ("u", False))
    assert mode.written(["id", "kind", "v"]) == ["id", "v"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"xasink.colour": "blue", "xasink.batchsize": "1"},
            "Unknown option(s) xasink.batchsize, xasink.colour; xasink's options are "
            "xasink.mode, xasink.key, ",
        ),
        (
            {"truncate": "true"},
            "format('xasink') does not take option 'truncate': overwrite replaces the rows in "
            "one transaction; the table is never dropped.",
        ),
        ({"query": "select 1"}, "format('xasink') does not take option 'query': "),
        (
            {"batchsize": "ten"},
            "Option 'batchsize' takes a number, 0 or more; got 'ten'.",
        ),
        ({"batchsize": "1.5"}, "Option 'batchsize' takes a number, 0 or more; got '1.5'."),
        ({"numPartitions": "-1"}, "Option 'numpartitions' takes a number, 0 or more; got '-1'."),
        ({"xasink.grace": "-5"}, "Option 'grace' takes a number, 0 or more; got '-5'."),
        ({"batchsize": "0"}, "batch_size must be at least 1."),
        ({"xasink.bulk": "yes"}, "Option 'xasink.bulk' takes true or false; got 'yes'."),
        (
            {"xasink.mode": "replace"},
            "mode must be one of append, overwrite, upsert, merge; got 'replace'.",
        ),
        (
            {"xasink.mode": "upsert"},
            "mode='upsert' needs key=[...]: the column(s) that identify a row.",
        ),
        ({"key": "id", "xasink.key": "v"}, "Options 'key' and 'xasink.key' disagree."),
        (
            {"xasink.mode": "merge", "key": "id", "op": "v", "xasink.opValues": "[1]"},
            "xasink.opValues takes a JSON object, e.g. "
            '{"insert": "c", "update": "u", "delete": "d"}.',
        ),
        (
            {"xasink.create": "always"},
            "create must be 'if_missing' (create the table from the DataFrame's schema) or "
            "'never'; got 'always'.",
        ),
        (
            {"xasink.lockWaitTimeout": "600"},
            "network_timeout (600 s) must be above lock_wait_timeout (600 s): a lock wait "
            "would otherwise be taken for a dead connection.",
        ),
        (
            {"xasink.networkTimeout": "0"},
            "network_timeout must be a number of seconds above 0.",
        ),
        (
            {"xasink.dialect": "oracle"},
            "Unknown dialect 'oracle'; choose one of postgres, mysql, generic.",
        ),
    ],
)
def test_bad_options_name_the_option(options, extra, message):
    assert parse_error({**options, **extra}).startswith(message)


def test_missing_url_or_table(options):
    message = (
        "format('xasink') needs .option('url', 'jdbc:...') and .option('dbtable', 'table'): "
        "the database and the table to write."
    )
    assert parse_error({k: v for k, v in options.items() if k != "url"}) == message
    assert parse_error({k: v for k, v in options.items() if k != "dbtable"}) == message


def test_save_mode_and_xasink_mode_must_agree(options):
    options.update({"xasink.mode": "upsert", "key": "id"})
    assert parse_error(options, overwrite=True) == (
        "mode('overwrite') and xasink.mode='upsert' disagree: use mode('append') with "
        "xasink.mode='upsert', or drop xasink.mode."
    )
    options["xasink.mode"] = "overwrite"
    options.pop("key")
    assert parse(options, ["id"], overwrite=True).request.options.mode == "overwrite"


def test_a_missing_jar_is_named(options, tmp_path):
    missing = str(tmp_path / "nowhere.jar")
    options["xasink.jars"] = f"{options['xasink.jars']}, {missing}"
    with pytest.raises(DriverNotFoundError) as caught:
        parse(options, ["id"], overwrite=False)
    assert str(caught.value) == (
        f"JDBC jar(s) not found: {missing}. Check the paths given in jars=[...] or in $XASINK_JARS."
    )


def test_not_a_number_is_refused(options):
    options["xasink.grace"] = "nan"
    assert parse_error(options).startswith("Option 'grace' takes a number")


def test_a_heartbeat_interval_of_zero_is_refused(options):
    # 0 would mean "the driver beats", and no driver process lives through a format job.
    options["xasink.heartbeatInterval"] = "0"
    assert parse_error(options).startswith("Option 'heartbeatinterval' takes a number above 0")


def test_a_lease_shorter_than_three_heartbeat_intervals_is_refused(options):
    # Tasks beat once an interval: a shorter lease lets recovery abort a live job.
    options["xasink.leaseSeconds"] = "20"
    message = parse_error(options)
    assert message.startswith("Option 'xasink.leaseSeconds' (20) must be at least 3 heartbeat")
    assert "xasink.heartbeatInterval = 10" in message
    options["xasink.heartbeatInterval"] = "5"
    assert parse(options, ["id", "v"], overwrite=False).lease == 20


# -- every option is xasink's, Spark JDBC's, or the JDBC driver's: never ignored -------------
#: The connection properties a fake pgjdbc declares (the unit layer asks no JVM).
PGJDBC = ("ApplicationName", "currentSchema", "options", "socketTimeout", "sslmode")


def declared(spec) -> tuple[str, ...]:
    return PGJDBC


def undeclared(spec) -> tuple[str, ...]:
    pytest.fail("the driver was asked for its properties, though no option needs them")


def test_mode_may_go_unprefixed_like_key(options):
    options.update({"mode": "upsert", "key": "id"})
    parsed = parse(options, ["id", "v"], overwrite=False, driver_properties=undeclared)
    assert (parsed.request.options.mode, parsed.request.options.key) == ("upsert", ("id",))
    options["xasink.mode"] = "merge"
    assert parse_error(options) == "Options 'mode' and 'xasink.mode' disagree."


def test_the_save_mode_and_the_mode_option_must_agree(options):
    options["mode"] = "overwrite"
    assert parse(options, ["id"], overwrite=True).request.options.mode == "overwrite"
    assert parse_error(options) == (
        "mode('append') and mode='overwrite' disagree: use mode('overwrite') instead of mode."
    )
    options["mode"] = "upsert"
    assert parse_error(options, overwrite=True).startswith(
        "mode('overwrite') and mode='upsert' disagree: use mode('append') with mode='upsert'"
    )


def test_driver_properties_take_the_drivers_own_spelling(options):
    # Spark hands a Python data source its option names lower-cased; pgjdbc reads
    # `ApplicationName` only so spelled.
    options.update({"applicationname": "probe", "sslmode": "require"})
    spec = parse(options, ["id"], overwrite=False, driver_properties=declared).request.spec
    assert spec.properties == (("ApplicationName", "probe"), ("sslmode", "require"))


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("mdoe", "mode"),
        ("kye", "key"),
        ("sslmdoe", "sslmode"),
        ("applicationnam", "ApplicationName"),
        ("numpartition", "numPartitions"),
        ("sessioninitstatment", "sessionInitStatement"),
        ("createtableoption", "createTableOptions"),
    ],
)
def test_an_option_nobody_knows_is_refused_with_the_nearest_known_one(options, name, nearest):
    options[name] = "x"
    with pytest.raises(ConfigurationError) as caught:
        parse(options, ["id", "v"], overwrite=False, driver_properties=declared)
    assert str(caught.value) == (
        f"format('xasink') has no option {name!r}, and the JDBC driver declares no connection "
        f"property of that name: did you mean {nearest!r}? Nothing was written."
    )


def test_an_unknown_xasink_option_names_the_nearest(options):
    options["xasink.opvalue"] = "{}"
    assert parse_error(options).endswith("Did you mean 'xasink.opValues'?")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("queryTimeout", "xasink.networkTimeout"),
        ("pushDownPredicate", "reads"),
        ("cascadeTruncate", "never truncates"),
        ("fetchsize", "reads"),
        ("partitionColumn", "reads"),
        ("customSchema", "reads"),
        ("keytab", "Kerberos"),
        ("connectionProvider", "xasink.xaDataSource"),
        ("tableComment", "COMMENT"),
        ("truncate", "never dropped"),
        ("isolationLevel", "READ COMMITTED"),
    ],
)
def test_spark_jdbc_options_without_a_meaning_here_are_refused_with_a_reason(options, name, reason):
    options[name.lower()] = "1"  # as Spark hands them over
    message = parse_error(options)
    assert message.startswith(f"format('xasink') does not take option {name!r}: ")
    assert reason in message


def test_session_init_statement_is_the_databases_session_init(options):
    options["sessioninitstatement"] = "SET ROLE writer"
    spec = parse(options, ["id"], overwrite=False, driver_properties=undeclared).request.spec
    assert spec.session_init == ("SET ROLE writer",)


def test_create_table_options_and_column_types(options):
    options.update(
        {
            "createtableoptions": "WITH (fillfactor=70)",
            "createtablecolumntypes": "NAME VARCHAR(64), v DECIMAL(12, 2), `id` BIGINT",
        }
    )
    request = parse(options, ["id", "name", "v"], overwrite=False).request
    assert request.new_table.options == "WITH (fillfactor=70)"
    assert request.new_table.column_types == (
        ("name", "VARCHAR(64)"),
        ("v", "DECIMAL(12, 2)"),
        ("id", "BIGINT"),
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"createtableoptions": "WITH (fillfactor=70); DROP TABLE t"},
            "createTableOptions cannot hold ';' (DDL written as given: one statement, no "
            "comments); got 'WITH (fillfactor=70); DROP TABLE t'.",
        ),
        (
            {"createtableoptions": "ENGINE=InnoDB /* x */"},
            "createTableOptions cannot hold '/*' ",
        ),
        ({"createtableoptions": "WITH (fillfactor=70"}, "createTableOptions has unbalanced"),
        (
            {"createtablecolumntypes": "nmae TEXT"},
            "createTableColumnTypes names no column 'nmae' of the created table (it gets "
            "id, name, v): did you mean 'name'?",
        ),
        (
            {"createtablecolumntypes": "name TEXT, name VARCHAR(3)"},
            "createTableColumnTypes names column 'name' twice.",
        ),
        (
            {"createtablecolumntypes": "name VARCHAR(64) NOT NULL"},
            "createTableColumnTypes['name'] takes a column type only",
        ),
        (
            {"createtablecolumntypes": "name ENUM('a', 'b')"},
            "createTableColumnTypes['name'] takes a column type only",
        ),
        (
            {"createtablecolumntypes": "name"},
            "createTableColumnTypes takes 'column TYPE, column TYPE, ...'",
        ),
        (
            {"createtableoptions": "ENGINE=InnoDB SELECT * FROM other"},
            "createTableOptions cannot hold 'SELECT': MySQL would fill the new table",
        ),
        (
            {"createtableoptions": "ENGINE=InnoDB TABLE other"},
            "createTableOptions cannot hold 'TABLE'",
        ),
        (
            {"createtableoptions": "WITH (fillfactor=70)", "xasink.create": "never"},
            "createTableOptions shapes a table xasink creates, and create='never' creates none",
        ),
    ],
)
def test_unsafe_create_options_are_refused(options, extra, message):
    assert parse_error({**options, **extra}, columns=("id", "name", "v")).startswith(message)


def test_a_quoted_word_of_the_create_options_is_not_taken_for_rows(options):
    options["createtableoptions"] = "ENGINE=InnoDB COMMENT='the table of values'"
    parse(options, ["id"], overwrite=False, driver_properties=lambda spec: ())


def test_a_drivers_undeclared_aliases_are_its_properties_too(options):
    """MariaDB Connector/J reads `useSSL`, `trustCertificateKeyStoreUrl`, ... though its
    getPropertyInfo declares only `useSsl`, `trustStore`, ...: they are passed on (in the
    declared spelling where one differs only by case)."""
    options.update({"url": "jdbc:mariadb://db/app", "useSSL": "true", "createDB": "true"})
    declared = ("useSsl", "trustStore", "createDatabaseIfNotExist")
    spec = parse(options, ["id"], overwrite=False, driver_properties=lambda s: declared).request
    assert dict(spec.spec.properties) == {"useSsl": "true", "createDB": "true"}


@pytest.mark.parametrize("name", ["sslmode", "sslrootcerts", "trustStoreUrl"])
def test_a_misspelt_tls_property_is_never_pointed_at_one_that_weakens_tls(options, name):
    """The nearest name of a TLS setting is a driver's, never xasink's own `mode`, and never
    one that turns certificate checks off."""
    options.update({"url": "jdbc:mariadb://db/app", name: "x"})
    declared = ("trustServerCertificate", "disableSslHostnameVerification", "serverSslCert")
    with pytest.raises(ConfigurationError) as refused:
        parse(options, ["id"], overwrite=False, driver_properties=lambda s: declared)
    message = str(refused.value)
    assert not any(f"'{n}'" in message for n in ("mode", *declared[:2])), message


def test_a_databases_properties_take_the_drivers_aliases_and_tls_hints(monkeypatch):
    """Database(properties=...) is checked as format's options are: an alias the driver
    reads is taken; a misspelt TLS setting is pointed at a driver's, never one that turns
    certificate checks off."""
    declared = ("useSsl", "trustServerCertificate", "serverSslCert")
    monkeypatch.setattr(sessions, "declared_properties", lambda spec: declared)
    url = "jdbc:mariadb://db/app"
    sessions.check_properties(make_spec(Database(url, properties={"useSSL": "true"})))
    with pytest.raises(ConfigurationError) as refused:
        sessions.check_properties(make_spec(Database(url, properties={"trustStoreUrl": "x"})))
    assert "trustServerCertificate" not in str(refused.value)
