"""Staged write modes: option validation, the apply plan kept in the journal, and the exact
SQL that applies a staging table to its target on each dialect."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fake_sql_errors import FakeSqlError

from xasink.dialects import get_dialect
from xasink.errors import ConfigurationError, InputDataError, JournalError
from xasink.spec import TableRef
from xasink.tables.applier import apply_statements, stale_statement
from xasink.tables.modes import CDC_OP_VALUES, ModeOptions
from xasink.tables.staging import (
    ApplyPlan,
    create_stage_sql,
    is_data_error,
    refused,
    stage_name,
)

JOB = "0123456789abcdef0123456789abcdef"
PG, MY = get_dialect("postgres"), get_dialect("mysql")
FRAME = ["id", "name", "op", "ts"]


def build(mode, key=None, op=None, order=None, op_values=None, columns=FRAME):
    return ModeOptions.build(mode, key, op, order, op_values, columns)


# -- ModeOptions -----------------------------------------------------------------------------
def test_append_and_overwrite_take_no_key():
    assert build("append") == ModeOptions("append")
    overwrite = build("overwrite")
    assert (overwrite.staged, overwrite.routed, overwrite.steering) == (True, False, ())
    assert (build("append").staged, build("append").routed) == (False, False)


def test_upsert_with_order_steers_by_the_order_column():
    options = build("upsert", key="id", order="ts")
    assert options == ModeOptions("upsert", ("id",), None, "ts")
    assert (options.staged, options.routed, options.steering) == (True, True, ("ts",))
    # The order column is written where the table has it (a created table has it), and
    # only steers the write where it has not.
    assert options.written(FRAME) == ["id", "name", "op", "ts"]
    assert options.with_table(lambda c: c != "ts").written(FRAME) == ["id", "name", "op"]
    assert options.with_table(lambda c: True) is options


def test_merge_without_op_values_knows_the_change_feed_spellings():
    options = build("merge", key=["id"], op="op", order="ts")
    assert options.op_values == (
        ("c", False),
        ("d", True),
        ("delete", True),
        ("i", False),
        ("insert", False),
        ("r", False),
        ("u", False),
        ("update", False),
        ("update_postimage", False),
    )
    assert (options.op_fold, options.op_skip) == (True, ("update_preimage",))
    assert options.written(FRAME) == ["id", "name", "ts"]  # never op
    assert options.with_table(lambda c: c != "ts").written(FRAME) == ["id", "name"]
    assert options.steering == ("op", "ts")


def test_cdc_spellings():
    assert dict(CDC_OP_VALUES) == {
        "insert": ("insert", "c", "r", "i"),
        "update": ("update", "u", "update_postimage"),
        "delete": ("delete", "d"),
        "skip": ("update_preimage",),
    }


def test_merge_with_own_op_values_compares_them_exactly():
    options = build(
        "merge",
        "id",
        "op",
        op_values={"insert": ["c", "r"], "update": "u", "delete": "D", "skip": "b"},
    )
    assert options.op_values == (("D", True), ("c", False), ("r", False), ("u", False))
    assert (options.op_fold, options.op_skip) == (False, ("b",))


def test_one_op_value_may_mean_insert_and_update():
    options = build("merge", "id", "op", op_values={"insert": "x", "update": "x", "delete": "d"})
    assert options.op_values == (("d", True), ("x", False))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("replace",), "mode must be one of append, overwrite, upsert, merge; got 'replace'."),
        (("upsert",), "mode='upsert' needs key=[...]: the column(s) that identify a row."),
        (
            ("merge", "id"),
            "mode='merge' needs op='<column>': the column saying insert, update or delete.",
        ),
        (
            ("upsert", "id", "op"),
            "op and op_values apply to mode='merge' only (change rows), not to "
            "mode='upsert': did you mean mode='merge'?",
        ),
        (
            ("append", None, None, None, {"delete": "d"}),
            "op and op_values apply to mode='merge' only (change rows), not to "
            "mode='append': did you mean mode='merge'?",
        ),
        (
            ("overwrite", None, None, "ts"),
            "order applies to mode='upsert' and mode='merge' only (the newest row per key "
            "wins), not to mode='overwrite': did you mean mode='upsert'?",
        ),
        (("upsert", ["id", "id"]), "key, op and order must name different columns."),
        (("merge", "id", "id"), "key, op and order must name different columns."),
        (("upsert", "id", None, "id"), "key, op and order must name different columns."),
        (("merge", "id", "op", "op"), "key, op and order must name different columns."),
        (
            ("upsert", ["id", "idx"]),
            "The DataFrame has no column(s) 'idx'; it has id, name, op, ts.",
        ),
        (
            ("merge", "id", "opx", "tsx"),
            "The DataFrame has no column(s) 'opx', 'tsx'; it has id, name, op, ts.",
        ),
        (
            ("merge", "id", "op", None, {"delete": "x", "skip": "x"}),
            "op value 'x' cannot mean both delete and skip.",
        ),
        (
            ("merge", "id", "op", None, {"delete": "x", "insert": "x"}),
            "op value 'x' cannot mean both delete and insert.",
        ),
    ],
)
def test_mode_options_errors_name_the_fix(args, message):
    with pytest.raises(ConfigurationError) as caught:
        build(*args)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "op_values", [{"insert": "c", "update": "u"}, {"delete": "d", "upsert": "u"}]
)
def test_op_values_need_delete_and_known_kinds(op_values):
    with pytest.raises(ConfigurationError) as caught:
        build("merge", "id", "op", op_values=op_values)
    assert str(caught.value) == (
        "op_values maps 'insert', 'update' and 'delete' (and optionally 'skip') to the op "
        "column's values, e.g. {'insert': 'c', 'update': 'u', 'delete': 'd'}; got "
        f"{op_values!r}."
    )


def test_op_values_without_any_delete_value_are_refused_or_applied():
    try:
        options = build("merge", "id", "op", op_values={"insert": "c", "update": "u", "delete": []})
    except ConfigurationError:
        return
    plan = _plan("merge", key=("id",), op_values=options.op_values)
    assert all("IN ()" not in sql for sql, _ in apply_statements(PG, plan))


# -- ApplyPlan -------------------------------------------------------------------------------
def _plan(mode, **fields):
    return ApplyPlan(
        mode=mode,
        target=TableRef("events", "app"),
        stage=stage_name(JOB, "app"),
        columns=("id", "name", "n"),
        **fields,
    )


MERGE = _plan(
    "merge",
    key=("id",),
    ordered=True,
    op_values=(("c", False), ("d", True), ("delete", True)),
    op_fold=True,
    op_skip=("update_preimage",),
)


def test_apply_plan_json_is_stable_and_round_trips():
    text = MERGE.to_json()
    assert json.loads(text) == {
        "columns": ["id", "name", "n"],
        "key": ["id"],
        "mode": "merge",
        "op_fold": True,
        "op_skip": ["update_preimage"],
        "op_values": [["c", False], ["d", True], ["delete", True]],
        "order_column": None,
        "ordered": True,
        "stage": {"name": f"xasink_stage_{JOB}", "schema": "app"},
        "target": {"name": "events", "schema": "app"},
        "tombs": None,
        "types": [],
    }
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert ApplyPlan.from_json(text) == MERGE
    overwrite = _plan("overwrite", types=("bigint", "text", "integer"))
    assert ApplyPlan.from_json(overwrite.to_json()) == overwrite


def test_a_plan_written_before_types_were_recorded_still_reads():
    raw = json.loads(_plan("overwrite").to_json())
    del raw["types"]
    assert ApplyPlan.from_json(json.dumps(raw)) == _plan("overwrite")


def test_an_apply_plan_row_missing_fields_is_an_error_not_a_guess():
    raw = json.loads(_plan("merge", key=("id",), op_values=(("d", True),)).to_json())
    del raw["op_fold"], raw["op_skip"]
    with pytest.raises(JournalError, match=r"not one this xasink wrote \(KeyError: 'op_fold'"):
        ApplyPlan.from_json(json.dumps(raw))


def test_stage_columns_and_names():
    assert stage_name(JOB, None) == TableRef(f"xasink_stage_{JOB}")
    assert MERGE.stage_columns == ("id", "name", "n", "xasink_op", "xasink_order")
    assert _plan("upsert", key=("id",)).stage_columns == ("id", "name", "n")
    assert MERGE.delete_values == ("d", "delete")
    assert MERGE.op_sql(MY, "s.") == "LOWER(s.`xasink_op`)"
    assert _plan("merge", op_values=(("d", True),)).op_sql(PG) == '"xasink_op"'


def test_create_stage_sql_keeps_every_column_nullable():
    types = ["bigint", "text", "numeric(10,2)", "text", "timestamptz"]
    assert create_stage_sql(PG, MERGE, types) == (
        f'CREATE TABLE "app"."xasink_stage_{JOB}" ("id" bigint, "name" text, '
        '"n" numeric(10,2), "xasink_op" text, "xasink_order" timestamptz)'
    )
    with pytest.raises(ValueError):
        create_stage_sql(PG, MERGE, types[:-1])


# -- the apply statements, exactly -------------------------------------------------------------
STAGE_PG = f'"app"."xasink_stage_{JOB}"'
STAGE_MY = f"`app`.`xasink_stage_{JOB}`"
LATEST_PG = (
    f'(SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY "id" ORDER BY "xasink_order" '
    f"DESC) AS xasink_rn FROM {STAGE_PG} t) r WHERE xasink_rn = 1) s"
)
LATEST_MY = (
    "(SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `xasink_order` "
    f"DESC) AS xasink_rn FROM {STAGE_MY} t) r WHERE xasink_rn = 1) s"
)
INSERT_PG = 'INSERT INTO "app"."events" ("id", "name", "n") SELECT "id", "name", "n" FROM '
INSERT_MY = "INSERT INTO `app`.`events` (`id`, `name`, `n`) SELECT `id`, `name`, `n` FROM "
#: Where the target stores the order column, its changes rank by that column (its type and
#: collation, which compare the orders across writes too).
STORED_PG = LATEST_PG.replace('ORDER BY "xasink_order"', 'ORDER BY "ts"')
STORED_MY = LATEST_MY.replace("ORDER BY `xasink_order`", "ORDER BY `ts`")
UPSERT_PG = 'ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name", "n" = EXCLUDED."n"'
UPSERT_MY = "ON DUPLICATE KEY UPDATE `name` = VALUES(`name`), `n` = VALUES(`n`)"


@pytest.mark.parametrize(
    ("dialect", "plan", "statements"),
    [
        (
            PG,
            _plan("overwrite"),
            [('DELETE FROM "app"."events"', ()), (INSERT_PG + STAGE_PG, ())],
        ),
        (
            MY,
            _plan("overwrite"),
            [("DELETE FROM `app`.`events`", ()), (INSERT_MY + STAGE_MY, ())],
        ),
        (PG, _plan("upsert", key=("id",)), [(f"{INSERT_PG}{STAGE_PG} s {UPSERT_PG}", ())]),
        (MY, _plan("upsert", key=("id",)), [(f"{INSERT_MY}{STAGE_MY} s {UPSERT_MY}", ())]),
        (
            PG,
            _plan("upsert", key=("id",), ordered=True),
            [(f"{INSERT_PG}{LATEST_PG} {UPSERT_PG}", ())],
        ),
        (
            MY,
            _plan("upsert", key=("id",), ordered=True),
            [(f"{INSERT_MY}{LATEST_MY} {UPSERT_MY}", ())],
        ),
        (
            PG,
            _plan("merge", key=("id",), op_values=(("c", False), ("d", True), ("u", False))),
            [
                (
                    'DELETE FROM "app"."events" WHERE ("id") IN (SELECT "id" FROM '
                    f'{STAGE_PG} s WHERE s."xasink_op" IN (?))',
                    ("d",),
                ),
                (f'{INSERT_PG}{STAGE_PG} s WHERE s."xasink_op" NOT IN (?) {UPSERT_PG}', ("d",)),
            ],
        ),
        (
            MY,
            MERGE,
            [
                (
                    "DELETE FROM `app`.`events` WHERE (`id`) IN (SELECT `id` FROM "
                    f"{LATEST_MY} WHERE LOWER(s.`xasink_op`) IN (?, ?))",
                    ("d", "delete"),
                ),
                (
                    f"{INSERT_MY}{LATEST_MY} WHERE LOWER(s.`xasink_op`) NOT IN (?, ?) {UPSERT_MY}",
                    ("d", "delete"),
                ),
            ],
        ),
        (
            PG,
            MERGE,
            [
                (
                    'DELETE FROM "app"."events" WHERE ("id") IN (SELECT "id" FROM '
                    f'{LATEST_PG} WHERE LOWER(s."xasink_op") IN (?, ?))',
                    ("d", "delete"),
                ),
                (
                    f'{INSERT_PG}{LATEST_PG} WHERE LOWER(s."xasink_op") NOT IN (?, ?) {UPSERT_PG}',
                    ("d", "delete"),
                ),
            ],
        ),
    ],
    ids=[
        "pg-overwrite",
        "mysql-overwrite",
        "pg-upsert",
        "mysql-upsert",
        "pg-upsert-ordered",
        "mysql-upsert-ordered",
        "pg-merge",
        "mysql-merge-ordered-folded",
        "pg-merge-ordered-folded",
    ],
)
def test_apply_statements(dialect, plan, statements):
    assert apply_statements(dialect, plan) == statements


def test_upsert_of_key_columns_only():
    plan = ApplyPlan("upsert", TableRef("t"), TableRef("s"), ("id",), ("id",))
    assert apply_statements(PG, plan) == [
        ('INSERT INTO "t" ("id") SELECT "id" FROM "s" s ON CONFLICT ("id") DO NOTHING', ())
    ]
    assert apply_statements(MY, plan) == [
        (
            "INSERT INTO `t` (`id`) SELECT `id` FROM `s` s ON DUPLICATE KEY UPDATE `id` = "
            "VALUES(`id`)",
            (),
        )
    ]


def test_apply_quotes_hostile_column_names():
    plan = ApplyPlan("overwrite", TableRef('t"'), TableRef("s"), ('a"b', "c`d"))
    assert apply_statements(PG, plan)[1] == (
        'INSERT INTO "t""" ("a""b", "c`d") SELECT "a""b", "c`d" FROM "s"',
        (),
    )
    assert apply_statements(MY, plan)[1] == (
        'INSERT INTO `t"` (`a"b`, `c``d`) SELECT `a"b`, `c``d` FROM `s`',
        (),
    )


# -- refused rows ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "data"),
    [
        (InputDataError("dup"), True),
        (FakeSqlError("23505"), True),  # unique violation
        (FakeSqlError("22001"), True),  # value too long
        (FakeSqlError("21000"), True),  # ON CONFLICT would change a row twice
        (FakeSqlError("P0001"), True),  # a trigger's RAISE
        (FakeSqlError("HY000", 1062), True),  # MySQL duplicate key
        (FakeSqlError("HY000", 4025), True),  # MariaDB CHECK
        (FakeSqlError("40001"), False),  # serialization failure: retry helps
        (FakeSqlError("42601"), False),  # syntax error
        (FakeSqlError("HY000", 1205), False),  # lock wait timeout
        (RuntimeError("boom"), False),
    ],
)
def test_is_data_error(error, data):
    assert is_data_error(error) is data


@pytest.mark.parametrize(
    ("error", "missing", "lock"),
    [
        (FakeSqlError("42P01"), True, False),
        (FakeSqlError("42S02", 1146), True, False),
        (FakeSqlError("55P03"), False, True),
        (FakeSqlError("HY000", 1205), False, True),
        (FakeSqlError("HY000", 3572), False, True),
        (FakeSqlError("42601"), False, False),
    ],
)
def test_dialect_error_classes(error, missing, lock):
    assert (PG.is_missing_table(error), PG.is_lock_timeout(error)) == (missing, lock)


def test_refused_names_the_job_and_the_target():
    error = refused(str(MERGE.target), JOB, "duplicate key value violates unique constraint")
    assert isinstance(error, InputDataError)
    assert str(error) == (
        f"app.events refused the rows of job {JOB} (duplicate key value violates unique "
        "constraint). Nothing was changed in app.events: the job is aborted and its staging "
        "table dropped. Fix the data or the table's constraints, then run the write again."
    )


def test_a_one_phase_job_stages_in_the_sessions_temporary_schema():
    """A single-branch job stages in a temporary table of its own session (PostgreSQL's
    pg_temp; MySQL keeps temporary tables beside the others): nothing outlives it."""
    from xasink.tables.staging import temporary_stage

    types = ["bigint", "text", "numeric(10,2)", "text", "timestamptz"]
    assert create_stage_sql(PG, temporary_stage(MERGE, PG), types, temporary=True) == (
        f'CREATE TEMPORARY TABLE "pg_temp"."xasink_stage_{JOB}" ("id" bigint, "name" text, '
        '"n" numeric(10,2), "xasink_op" text, "xasink_order" timestamptz)'
    )
    assert temporary_stage(MERGE, MY).stage == MERGE.stage
    assert (PG.drop_temporary, MY.drop_temporary) == ("DROP TABLE", "DROP TEMPORARY TABLE")


# -- a target that stores the order column: the newest change wins across writes ------------
def test_an_upsert_over_a_stored_order_updates_only_older_rows():
    plan = replace(_plan("upsert", key=("id",), ordered=True), columns=("id", "name", "ts"))
    plan = replace(plan, order_column="ts")
    (pg,) = apply_statements(PG, plan)
    assert pg[0].startswith('INSERT INTO "app"."events" AS "xasink_stored" ("id", "name", "ts")')
    assert pg[0].endswith(
        'ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name", "ts" = EXCLUDED."ts" WHERE '
        '"xasink_stored"."ts" IS NULL OR "xasink_stored"."ts" < EXCLUDED."ts"'
    )
    (my,) = apply_statements(MY, plan)
    t = "`app`.`events`"  # the stored row: the SELECT's columns have the same names
    newer = f"({t}.`ts` IS NULL OR {t}.`ts` < VALUES(`ts`))"
    assert my[0].endswith(  # the order column last: every condition reads the stored order
        f"ON DUPLICATE KEY UPDATE `name` = IF({newer}, VALUES(`name`), {t}.`name`), "
        f"`ts` = IF({newer}, VALUES(`ts`), {t}.`ts`)"
    )


def test_a_merge_over_a_stored_order_deletes_only_older_rows():
    plan = replace(MERGE, columns=("id", "name", "ts"), order_column="ts")
    delete, insert = apply_statements(PG, plan)
    older = '("xasink_stored"."ts" IS NULL OR "xasink_stored"."ts" < s."ts")'
    assert delete[0] == (  # driven from the staged changes, the stored rows reached by key
        f'DELETE FROM "app"."events" AS "xasink_stored" USING {STORED_PG} WHERE s."id" = '
        f'"xasink_stored"."id" AND LOWER(s."xasink_op") IN (?, ?) AND {older}'
    )
    my_older = "(`xasink_stored`.`ts` IS NULL OR `xasink_stored`.`ts` < s.`ts`)"
    assert apply_statements(MY, plan)[0][0] == (
        f"DELETE `xasink_stored` FROM `app`.`events` AS `xasink_stored` JOIN {STORED_MY} ON "
        f"s.`id` = `xasink_stored`.`id` WHERE LOWER(s.`xasink_op`) IN (?, ?) AND {my_older}"
    )
    assert 'WHERE "xasink_stored"."ts" IS NULL' in insert[0]
    assert stale_statement(PG, plan) == (
        f'SELECT COUNT(*) FROM {STORED_PG} JOIN "app"."events" o ON s."id" = o."id" WHERE NOT '
        '(o."ts" IS NULL OR o."ts" < s."ts")',
        (),
    )
    assert stale_statement(PG, replace(plan, order_column=None)) is None


def test_a_self_reference_orders_inserts_over_one_row_per_key_and_unlinks_deletes():
    from xasink.tables.self_reference import SelfReference

    boss = SelfReference(("boss",), ("id",), nullable=True)
    plan = _plan("upsert", key=("id",), ordered=True)
    (insert,) = apply_statements(MY, plan, (boss,))
    sql = insert[0]
    # Depths over the newest version of each key, each node and depth once.
    assert "SELECT DISTINCT n.`id`, n.`boss` FROM (SELECT * FROM (SELECT t.*, ROW_NUMBER()" in sql
    assert " UNION SELECT " in sql and "UNION ALL" not in sql
    assert sql.index("ORDER BY COALESCE(xasink_levels.xasink_depth") < sql.index("ON DUPLICATE")
    overwrite = apply_statements(MY, _plan("overwrite"), (replace(boss, staged=False),))
    assert overwrite[0] == (
        "UPDATE `app`.`events` SET `boss` = NULL WHERE (`boss` IS NOT NULL)",
        (),
    )
    assert overwrite[1] == ("DELETE FROM `app`.`events`", ())
    assert "ORDER BY" not in overwrite[2][0], "an unstaged reference cannot order the inserts"
    assert apply_statements(MY, _plan("overwrite")) == overwrite[1:], "no reference: as before"
