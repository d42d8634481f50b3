"""Dialects: identifier quoting, picking a dialect from a URL, where a URL points, and the
small SQL fragments each dialect contributes."""

from __future__ import annotations

import pytest

from xasink.defaults import DIALECT_NAMES
from xasink.dialects import DIALECTS, dialect_name_for, get_dialect
from xasink.dialects.base import TableIndex
from xasink.dialects.certificates import certificate_hint
from xasink.dialects.mysql import MARIADB_DATASOURCE, MYSQL_DATASOURCE, version_problem
from xasink.errors import ConfigurationError
from xasink.spec import ConnectionSpec, TableRef

PG, MY, GENERIC = get_dialect("postgres"), get_dialect("mysql"), get_dialect("generic")


@pytest.mark.parametrize(
    ("dialect", "identifier", "quoted"),
    [
        (PG, "events", '"events"'),
        (PG, 'we"ird', '"we""ird"'),
        (PG, '""', '""""""'),
        (PG, "a`b", '"a`b"'),
        (PG, "my.table; DROP TABLE x", '"my.table; DROP TABLE x"'),
        (PG, "", '""'),
        (MY, "events", "`events`"),
        (MY, "a`b", "`a``b`"),
        (MY, "``", "``````"),
        (MY, 'we"ird', '`we"ird`'),
        (GENERIC, 'x"y', '"x""y"'),
    ],
)
def test_quote_doubles_the_quote_character(dialect, identifier, quoted):
    assert dialect.quote(identifier) == quoted


@pytest.mark.parametrize("dialect", [PG, MY, GENERIC], ids=["postgres", "mysql", "generic"])
def test_quote_refuses_nul(dialect):
    with pytest.raises(ConfigurationError, match=r"^Identifiers cannot contain NUL characters\.$"):
        dialect.quote("a\x00b")


def test_qualified_names_quote_each_part():
    assert PG.qualified(TableRef("t.x", 's"1')) == '"s""1"."t.x"'
    assert PG.qualified(TableRef("t")) == '"t"'
    assert MY.qualified(TableRef("t`", "db")) == "`db`.`t```"


def test_mysql_compares_column_names_case_insensitively():
    assert MY.column_key("UserId") == "userid"
    assert PG.column_key("UserId") == "UserId"


@pytest.mark.parametrize(
    ("url", "explicit", "xa_datasource", "name"),
    [
        ("jdbc:postgresql://h/db", None, None, "postgres"),
        ("jdbc:postgresql:db", None, None, "postgres"),
        ("jdbc:mysql://h/db", None, None, "mysql"),
        ("jdbc:mariadb://h/db", None, None, "mysql"),
        ("jdbc:mariadb:loadbalance://h1,h2/db", None, None, "mysql"),
        ("jdbc:postgresql://h/db", "generic", None, "generic"),
        ("jdbc:oracle:thin:@h:1521/x", None, "oracle.jdbc.xa.client.OracleXADataSource", "generic"),
        ("jdbc:oracle:thin:@h:1521/x", "generic", None, "generic"),
    ],
)
def test_dialect_from_url(url, explicit, xa_datasource, name):
    assert dialect_name_for(url, explicit, xa_datasource) == name


@pytest.mark.parametrize(
    ("url", "explicit", "message"),
    [
        ("jdbc:postgresql://h/db", "oracle", "Unknown dialect 'oracle'; choose one of postgres, "),
        ("postgresql://h/db", None, "The URL must be a JDBC URL such as jdbc:postgresql://"),
        ("JDBC:POSTGRESQL://h/db", None, "The URL must be a JDBC URL such as jdbc:postgresql://"),
        ("jdbc:oracle:thin:@h:1521/x", None, "xasink knows jdbc:postgresql:, jdbc:mysql: and "),
    ],
)
def test_dialect_errors_say_what_to_pass(url, explicit, message):
    with pytest.raises(ConfigurationError) as caught:
        dialect_name_for(url, explicit)
    assert str(caught.value).startswith(message)


def test_unknown_dialect_lists_the_choices():
    with pytest.raises(ConfigurationError) as caught:
        dialect_name_for("jdbc:postgresql://h/db", "oracle")
    assert str(caught.value) == "Unknown dialect 'oracle'; choose one of postgres, mysql, generic."


@pytest.mark.parametrize(
    ("dialect", "url", "address"),
    [
        (PG, "jdbc:postgresql://h/db", ("h", 5432)),
        (PG, "jdbc:postgresql://h:6543/db", ("h", 6543)),
        (PG, "jdbc:postgresql://db.example.com:1/db?ssl=true", ("db.example.com", 1)),
        (PG, "jdbc:postgresql://h?ssl=true", ("h", 5432)),
        (PG, "jdbc:postgresql://[::1]:5433/db", ("::1", 5433)),
        (PG, "jdbc:postgresql://[::1]/db", ("::1", 5432)),
        (PG, "jdbc:postgresql://h1:5432,h2:5433/db", ("h1", 5432)),
        (PG, "jdbc:postgresql:db", None),
        (MY, "jdbc:mysql://u:pw@h:3307/db", ("h", 3307)),
        (MY, "jdbc:mysql://h", ("h", 3306)),
        (MY, "jdbc:mariadb:loadbalance://h1:3306,h2/db", ("h1", 3306)),
        (GENERIC, "jdbc:db2://h:50000/x", ("h", 50000)),
        (GENERIC, "jdbc:db2://h/x", None),  # no port, no default: unknown
    ],
)
def test_host_port(dialect, url, address):
    assert dialect.host_port(url) == address


def test_host_port_of_mysql_address_equals_syntax():
    url = "jdbc:mysql://address=(host=h)(port=3307)/db"
    assert MY.host_port(url) in (("h", 3307), None)


def test_upsert_clauses():
    assert PG.upsert_clause(["id"], ["a", 'b"']) == (
        'ON CONFLICT ("id") DO UPDATE SET "a" = EXCLUDED."a", "b""" = EXCLUDED."b"""'
    )
    assert PG.upsert_clause(["id", "k"], []) == 'ON CONFLICT ("id", "k") DO NOTHING'
    assert MY.upsert_clause(["id"], ["a"]) == "ON DUPLICATE KEY UPDATE `a` = VALUES(`a`)"
    assert MY.upsert_clause(["id", "k"], []) == (
        "ON DUPLICATE KEY UPDATE `id` = VALUES(`id`), `k` = VALUES(`k`)"
    )
    with pytest.raises(ConfigurationError, match="The generic dialect has no upsert statement"):
        GENERIC.upsert_clause(["id"], ["a"])


def test_lock_wait_statements():
    assert PG.lock_wait_sql(10) == ("SET lock_timeout = '10s'", "SET lock_timeout = DEFAULT")
    assert MY.lock_wait_sql(7) == (
        "SET SESSION lock_wait_timeout = 7, innodb_lock_wait_timeout = 7",
        "SET SESSION lock_wait_timeout = DEFAULT, innodb_lock_wait_timeout = DEFAULT",
    )
    assert GENERIC.lock_wait_sql(10) == (None, None)


def test_journal_ddl_per_dialect():
    xy, staged = TableIndex("xy", ("x", "y")), TableIndex("staged", ("s",), present="p")
    assert PG.create_table_sql('"s"."j"', "j", "a int", [xy, staged]) == [
        'CREATE TABLE IF NOT EXISTS "s"."j" (a int)',
        'CREATE INDEX IF NOT EXISTS "j_xy_idx" ON "s"."j" (x, y)',
        'CREATE INDEX IF NOT EXISTS "j_staged_idx" ON "s"."j" (s) WHERE p IS NOT NULL',
    ]
    # No partial indexes on MySQL: the rows with a value are a range of a prefix index.
    assert MY.create_table_sql("`j`", "j", "a int", [xy, staged]) == [
        "CREATE TABLE IF NOT EXISTS `j` (a int, INDEX `j_xy_idx` (x, y), "
        "INDEX `j_staged_idx` (s, p(1)))"
    ]
    assert MY.create_index_sql("`j`", "j", staged) == "CREATE INDEX `j_staged_idx` ON `j` (s, p(1))"
    # A server without partial indexes of its own gets the plain ones only.
    # ANSI has no IF NOT EXISTS: created once, under the journal's check that it is missing;
    # an index is named in its table's schema (Derby, DB2, Oracle keep indexes per schema).
    assert GENERIC.create_table_sql('"s"."j"', "j", "a int", [xy, staged]) == [
        'CREATE TABLE "s"."j" (a int)',
        'CREATE INDEX "s"."j_xy_idx" ON "s"."j" (x, y)',
    ]
    assert GENERIC.create_table_sql('"j"', "j", "a int", [xy]) == [
        'CREATE TABLE "j" (a int)',
        'CREATE INDEX "j_xy_idx" ON "j" (x, y)',
    ]
    assert (PG.limit_sql(20), MY.limit_sql(20)) == ("LIMIT 20", "LIMIT 20")
    assert GENERIC.limit_sql(20) == "FETCH FIRST 20 ROWS ONLY"
    # Time through the JDBC escapes, which the driver or server translates.
    assert GENERIC.ago_sql(1.5) == "{fn TIMESTAMPADD(SQL_TSI_SECOND, -2, CURRENT_TIMESTAMP)}"
    assert GENERIC.age_sql("c") == "{fn TIMESTAMPDIFF(SQL_TSI_SECOND, c, CURRENT_TIMESTAMP)}"
    assert PG.ago_sql(90) == "statement_timestamp() - make_interval(secs => 90.000000)"
    assert MY.ago_sql(1.5) == "UTC_TIMESTAMP(6) - INTERVAL 1500000 MICROSECOND"
    assert MY.ascii_id_type(32) == "VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin"
    assert PG.ascii_id_type(32) == "VARCHAR(32)"


def test_datasource_urls_carry_timeouts_and_properties_never_the_password():
    pg_spec = ConnectionSpec(
        "jdbc:postgresql://h/d?ssl=true", "u", "hunter2", (("ApplicationName", "me"),)
    )
    assert PG.datasource_url(pg_spec, "org.postgresql.xa.PGXADataSource") == (
        "jdbc:postgresql://h/d?ssl=true&connectTimeout=10&loginTimeout=10&tcpKeepAlive=true"
        "&socketTimeout=600&ApplicationName=me"
    )
    my_spec = ConnectionSpec(
        "jdbc:mysql://h/d",
        "u",
        "hunter2",
        (("useSSL", "true"),),
        connect_timeout=5,
        network_timeout=2.5,
    )
    assert MY.datasource_url(my_spec, MARIADB_DATASOURCE) == (
        "jdbc:mariadb://h/d?connectTimeout=5000&socketTimeout=2500&useSSL=true"
    )
    assert MY.datasource_url(my_spec, MYSQL_DATASOURCE) == (
        "jdbc:mysql://h/d?connectTimeout=5000&pinGlobalTxToPhysicalConnection=true"
        "&socketTimeout=2500&useSSL=true"
    )


def test_only_branch_connections_allow_local_infile():
    assert MY.branch_properties() == (("allowLocalInfile", "true"),)
    assert PG.branch_properties() == ()


def test_postgres_catalog_queries_bind_the_quoted_name():
    sql, params = PG.describe_columns_sql(TableRef('t"x', "s"))
    assert params == ('"s"."t""x"',)
    assert "to_regclass(?)" in sql and 't"x' not in sql
    assert MY.unique_keys_sql(TableRef("t", None))[1] == (None, "t")


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("10.11.6-MariaDB-1:10.11.6+maria~ubu2204", None),
        ("10.5.0-MariaDB", None),
        ("8.0.36", None),
        ("5.7.7", None),
        (
            "10.4.32-MariaDB",
            "MariaDB 10.4.32-MariaDB rolls prepared XA branches back when their connection "
            "closes, so exactly-once cannot be guaranteed. Upgrade to MariaDB 10.5.0 or later.",
        ),
        (
            "5.7.6-log",
            "MySQL 5.7.6-log rolls prepared XA branches back when their connection closes, so "
            "exactly-once cannot be guaranteed. Upgrade to MySQL 5.7.7 or later.",
        ),
    ],
)
def test_server_versions_that_keep_prepared_branches(version, problem):
    assert version_problem(version) == problem


def test_the_command_line_names_every_dialect():
    """The command line lists the dialects from `defaults`, without loading their code."""
    assert tuple(DIALECTS) == DIALECT_NAMES


#: What the drivers said, word for word, when refusing a certificate (tests/test_tls.py).
UNTRUSTED = {
    "postgres": "SSL error: PKIX path building failed: sun.security.provider.certpath."
    "SunCertPathBuilderException: unable to find valid certification path to requested target",
    "mysql": "Could not connect to 127.0.0.1:55537 : PKIX path building failed: sun.security."
    "provider.certpath.SunCertPathBuilderException: unable to find valid certification path",
}
WRONG_HOST = {
    "postgres": "The hostname 127.0.0.1 could not be verified by hostnameverifier "
    "PgjdbcHostnameVerifier.",
    "mysql": '(conn=9) SSL hostname verification failed : IPv4 host "127.0.0.1" doesn\'t '
    'correspond to certificate CN "db.example" and SAN[{DNS:"db.example"}]',
}


@pytest.mark.parametrize(
    ("name", "prop"), [("postgres", "sslrootcert"), ("mysql", "serverSslCert")]
)
def test_a_refused_certificate_names_the_drivers_setting_to_change(name, prop):
    dialect = get_dialect(name)
    untrusted = certificate_hint(dialect.tls_ca_property, UNTRUSTED[name])
    assert untrusted and f"the {prop} property must name the file of the CA" in untrusted
    wrong_host = certificate_hint(dialect.tls_ca_property, WRONG_HOST[name])
    assert wrong_host and "does not name the host in the URL" in wrong_host
    assert "disableSslHostnameVerification" not in wrong_host
    assert (
        certificate_hint(dialect.tls_ca_property, "FATAL: password authentication failed") is None
    )
