"""The SQL a write takes from its user (`replace_where`, `pre_sql`, `post_sql`): what is
refused before anything connects, the statements a slice overwrite applies, and the stored
plan that an older release must refuse rather than apply as a whole-table overwrite."""

from __future__ import annotations

import json

import pytest

from xasink.dialects import get_dialect
from xasink.errors import ConfigurationError, JournalError
from xasink.protocol.jobtables import modes_in_plan, tables_in_plan
from xasink.protocol.journal_tables import SEVERAL_WRITES
from xasink.spark.options import parse
from xasink.spec import TableRef
from xasink.tables.applier import apply_statements
from xasink.tables.modes import ModeOptions
from xasink.tables.self_reference import SelfReference
from xasink.tables.staging import ApplyPlan, ApplyPlans
from xasink.tables.user_sql import check_actions, check_predicate

PG, MY = get_dialect("postgres"), get_dialect("mysql")
JOB = "0123456789abcdef0123456789abcdef"


def _plan(**fields) -> ApplyPlan:
    return ApplyPlan(
        mode="overwrite",
        target=TableRef("events", "app"),
        stage=TableRef(f"xasink_stage_{JOB}", "app"),
        columns=("id", "day"),
        **fields,
    )


# -- replace_where ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "predicate",
    [
        "day = '2024-02-29'",
        "day IN ('a;b', 'c--d', 'e/*f')",  # inside string literals: text, not SQL
        "(a > 1) AND (b < 2 OR c IS NULL)",
        "name = 'it''s'",
    ],
)
def test_a_predicate_is_one_condition(predicate):
    assert check_predicate(f"  {predicate} ") == predicate


@pytest.mark.parametrize(
    ("predicate", "why"),
    [
        ("", "SQL condition"),
        ("   ", "SQL condition"),
        (None, "SQL condition"),
        ("a = 1; DELETE FROM t", "';'"),
        ("a = 1 -- and the rest", "'--'"),
        ("a = 1 /* x */", "'/\\*'"),
        ("a = 1) OR (1 = 1", "closes a parenthesis"),
        ("(a = 1", "not closed"),
        ("a = 'open", "not closed"),
        ("a = 'x\\'; DROP TABLE t; --'", "not closed|';'|'--'"),  # a backslash escape on MySQL
    ],
)
def test_a_predicate_that_is_not_one_condition_is_refused(predicate, why):
    with pytest.raises(ConfigurationError, match=why):
        check_predicate(predicate)


def test_replace_where_goes_with_overwrite_only():
    built = ModeOptions.build("overwrite", None, None, None, None, ["id"], "id > 1")
    assert (built.replace_where, built.staged) == ("id > 1", True)
    for mode, key in (("append", None), ("upsert", "id"), ("merge", "id")):
        with pytest.raises(ConfigurationError, match="mode='overwrite' only"):
            ModeOptions.build(
                mode, key, "id" if mode == "merge" else None, None, None, ["id", "op"], "id > 1"
            )


def test_a_slice_overwrite_deletes_and_unlinks_its_slice_only():
    refs = [SelfReference(("parent",), ("id",), True)]
    for dialect in (PG, MY):
        q = dialect.quote
        target = dialect.qualified(TableRef("events", "app"))
        statements = [
            sql for sql, _ in apply_statements(dialect, _plan(replace_where="day > 1"), refs)
        ]
        parent = q("parent")
        assert statements[0] == (
            f"UPDATE {target} SET {parent} = NULL WHERE ({parent} IS NOT NULL) AND (day > 1)"
        )
        assert statements[1] == f"DELETE FROM {target} WHERE (day > 1)"
        assert statements[2].startswith(f"INSERT INTO {target}")
        whole = [sql for sql, _ in apply_statements(dialect, _plan(), refs)]
        assert whole[1] == f"DELETE FROM {target}"


# -- pre_sql / post_sql ----------------------------------------------------------------------
def test_actions_are_a_statement_or_a_list():
    assert check_actions("pre_sql", None) == ()
    assert check_actions("pre_sql", "UPDATE audit SET n = n + 1;") == (
        "UPDATE audit SET n = n + 1",
    )
    assert check_actions("post_sql", ["DELETE FROM c", "INSERT INTO l VALUES ('a;b')"]) == (
        "DELETE FROM c",
        "INSERT INTO l VALUES ('a;b')",
    )
    # PostgreSQL's DDL is transactional: it commits or rolls back with the rows.
    assert check_actions("post_sql", "CREATE INDEX i ON t (a)", "postgres")
    assert check_actions("post_sql", "DO $$ BEGIN PERFORM 1; END $$", "postgres")
    built = ModeOptions.build("append", None, None, None, None, ["id"], None, "SELECT 1")
    assert (built.pre_sql, built.staged, built.actions) == (("SELECT 1",), True, True)


@pytest.mark.parametrize(
    ("statement", "dialect"),
    [
        ("COMMIT", None),
        ("commit work", None),
        ("ROLLBACK", None),
        ("BEGIN", None),
        ("START TRANSACTION", None),
        ("SAVEPOINT a", None),
        ("RELEASE SAVEPOINT a", None),
        ("SET autocommit = 1", None),
        ("set @@autocommit=1", None),
        ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", None),
        ("XA COMMIT 'x'", None),
        ("PREPARE TRANSACTION 'x'", None),
        ("LOCK TABLES t WRITE", None),
        ("VACUUM t", None),
        ("CREATE INDEX CONCURRENTLY i ON t (a)", "postgres"),
        ("UPDATE a SET b = 1; COMMIT", None),
        ("UPDATE a SET b = 1 -- x", None),
        ("", None),
        ("CREATE TABLE t (a INT)", "mysql"),
        ("ALTER TABLE t ADD c INT", "mysql"),
        ("DROP TABLE t", "mysql"),
        ("TRUNCATE t", "mysql"),
        ("RENAME TABLE a TO b", "mysql"),
        ("GRANT SELECT ON t TO u", "mysql"),
        ("SET LOCAL autocommit=1", "mysql"),  # MySQL's LOCAL is the session
        ("SET @@local.autocommit=1", None),
        ("SET sql_mode=DEFAULT, autocommit=1", None),
        ("SET @a = 1, autocommit = 1", "mysql"),
        ("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", None),
        ("SET search_path TO other", None),
        ("SET ROLE admin", None),
        ("USE other_db", None),
        ("RESET ALL", "postgres"),
        ("DISCARD ALL", "postgres"),
        ("UPDATE t SET a = 1 # the rest", "mysql"),
        ("SELECT $x$; DELETE FROM t; $x$", "mysql"),  # no $-quotes on MySQL
    ],
)
def test_an_action_that_would_end_the_transaction_is_refused(statement, dialect):
    with pytest.raises(ConfigurationError, match=r"post_sql statement .* is refused"):
        check_actions("post_sql", [statement], dialect)


def test_actions_of_the_wrong_kind_are_refused():
    with pytest.raises(ConfigurationError, match="a SQL statement or a list"):
        check_actions("pre_sql", 5)
    with pytest.raises(ConfigurationError, match="a SQL statement or a list"):
        check_actions("pre_sql", ["SELECT 1", 2])


def test_format_options_take_replace_where_and_actions():
    options = {
        "url": "jdbc:postgresql://db/app",
        "dbtable": "events",
        "xasink.replaceWhere": "day = 'x'",
        "xasink.preSql": '["DELETE FROM a", "DELETE FROM b"]',
        "xasink.postSql": "UPDATE c SET n = 1",
    }
    request = parse(options, ["id", "day"], overwrite=True, driver_properties=lambda s: []).request
    assert (request.options.replace_where, request.options.pre_sql, request.options.post_sql) == (
        "day = 'x'",
        ("DELETE FROM a", "DELETE FROM b"),
        ("UPDATE c SET n = 1",),
    )
    with pytest.raises(ConfigurationError, match="JSON list"):
        parse(
            {**options, "xasink.preSql": "[1]"},
            ["id"],
            overwrite=True,
            driver_properties=lambda s: [],
        )


# -- the stored plan -------------------------------------------------------------------------
def _older_release_reads(text: str) -> ApplyPlans:
    """How a release before replace_where and actions read a job row's plan: a single plan,
    or exactly {"writes": [...]}, else the single plan's keys (a KeyError: JournalError)."""
    raw = json.loads(text)
    if isinstance(raw, dict) and set(raw) == {"writes"}:
        return ApplyPlans(tuple(ApplyPlan._from_raw(w) for w in raw["writes"]))
    try:
        return ApplyPlans((ApplyPlan._from_raw(raw),))
    except KeyError as exc:
        raise JournalError(f"not one this xasink wrote ({exc})") from None


@pytest.mark.parametrize(
    "fields",
    [
        {"replace_where": "day > 1"},
        {"pre_sql": ("DELETE FROM a",)},
        {"post_sql": ("UPDATE b SET n = 1",), "replace_where": "day = 2"},
    ],
)
def test_a_plan_an_older_release_cannot_apply_is_one_it_refuses(fields):
    plan = _plan(**fields)
    text = plan.to_json()
    raw = json.loads(text)
    assert set(raw) == {"writes", "requires"} and "mode" not in raw
    assert text.startswith(SEVERAL_WRITES)  # a transaction's plan, to the journal's queries
    assert (modes_in_plan(text), tables_in_plan(text)) == ("overwrite", ["app.events"])
    assert raw["requires"] == sorted(plan.requires)
    with pytest.raises(JournalError, match="not one this xasink wrote"):
        _older_release_reads(text)
    assert ApplyPlans.from_json(text) == ApplyPlans((plan,))
    several = ApplyPlans((plan, _plan()))
    assert ApplyPlans.from_json(several.to_json()) == several
    assert "requires" in json.loads(several.to_json())


def test_a_plan_without_them_keeps_the_shape_every_release_reads():
    plain = _plan()
    assert "replace_where" not in json.loads(plain.to_json())
    assert _older_release_reads(plain.to_json()) == ApplyPlans((plain,))


def test_an_unknown_requirement_is_refused_loudly():
    raw = json.loads(_plan(replace_where="day > 1").to_json())
    raw["requires"].append("time_travel")
    with pytest.raises(JournalError, match=r"'time_travel'.*does not know"):
        ApplyPlans.from_json(json.dumps(raw))


@pytest.mark.parametrize(
    "fields",
    [
        {"replace_where": "1=1) OR (1=1"},
        {"replace_where": "day > 1 -- the rest"},
        {"pre_sql": ("COMMIT",)},
        {"post_sql": ("UPDATE t SET a = 1", "DELETE FROM t; DROP TABLE u")},
    ],
)
def test_a_stored_plan_is_checked_again_as_the_options_were(fields):
    """Anyone who can write the journal can write a plan, which `xasink recover` runs: a
    plan's SQL that the write's options would have refused is refused when it is read."""
    for text in (_plan(**fields).to_json(), ApplyPlans((_plan(), _plan(**fields))).to_json()):
        with pytest.raises(JournalError, match=r"SQL that xasink refuses.*is refused.*--abandon"):
            ApplyPlans.from_json(text)
    assert ApplyPlans.from_json(_plan(pre_sql=("SELECT 1",)).to_json()).writes[0].pre_sql


@pytest.mark.parametrize(
    ("statement", "dialect"),
    [
        ("SET LOCAL search_path TO other", "postgres"),
        ("SET LOCAL lock_timeout = '5s'", None),
        ("SET @n = (SELECT COUNT(*) FROM t), @m := 'a,b'", "mysql"),
        ("UPDATE t SET a = b #>> '{x}'", "postgres"),  # an operator there, not a comment
        ("DO $x$ BEGIN PERFORM 1; END $x$", "postgres"),
    ],
)
def test_a_transaction_scoped_setting_and_server_syntax_are_taken(statement, dialect):
    assert check_actions("pre_sql", [statement], dialect) == (statement,)


def test_a_predicate_comment_is_refused_where_the_server_reads_one():
    assert check_predicate("doc #>> '{a}' = 'x'", "postgres")
    with pytest.raises(ConfigurationError, match="'#'"):
        check_predicate("a = 1 # x", "mysql")
