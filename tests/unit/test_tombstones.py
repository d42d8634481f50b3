"""The order of deleted keys (`xasink.tables.tombstones`): the tables' names, the plan that
names one, and the exact statements that keep and honour tombstones on each dialect."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from xasink.dialects import get_dialect
from xasink.errors import JournalError
from xasink.spec import TableRef
from xasink.tables.applier import apply_statements, stale_statement
from xasink.tables.modes import ModeOptions
from xasink.tables.staging import ApplyPlan, stage_name, temporary_stage
from xasink.tables.tombstones import check_tombs, keeps_deletes, tomb_table

JOB = "0123456789abcdef0123456789abcdef"
PG, MY = get_dialect("postgres"), get_dialect("mysql")
TARGET = TableRef("events", "app")
MERGE = ApplyPlan(
    mode="merge",
    target=TARGET,
    stage=stage_name(JOB, "journal"),
    columns=("id", "name", "ts"),
    key=("id",),
    ordered=True,
    op_values=(("d", True), ("u", False)),
    order_column="ts",
    tombs=tomb_table(TARGET),
)
TOMB = tomb_table(TARGET).name
LATEST_PG = (
    'SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY "id" ORDER BY "ts" '
    f'DESC) AS xasink_rn FROM "journal"."xasink_stage_{JOB}" t) r WHERE xasink_rn = 1'
)
LATEST_MY = (
    "SELECT * FROM (SELECT t.*, ROW_NUMBER() OVER (PARTITION BY `id` ORDER BY `ts` "
    f"DESC) AS xasink_rn FROM `journal`.`xasink_stage_{JOB}` t) r WHERE xasink_rn = 1"
)


def test_a_tables_tombstones_are_named_from_its_identity_safely_and_briefly():
    name = tomb_table(TARGET)  # beside the table, whichever journal writes it
    assert name.schema == "app" and name.name.startswith("xasink_tomb_events_")
    long = tomb_table(TableRef('Ünïcode "x"; DROP TABLE y -- ' * 10, "s")).name
    assert len(long) <= 53 and long.replace("_", "").isalnum() and long.isascii()
    others = [TableRef("events"), TableRef("events", "other"), TableRef("Events", "app")]
    assert len({tomb_table(t).name for t in [TARGET, *others]}) == 4  # exact identity
    assert tomb_table(TableRef("___", None)).name.count("__") == 0
    assert len(name.name) + len("_at_idx") <= 63  # its index's name fits both servers


def test_which_writes_keep_the_order_of_deletes():
    def options(mode: str, order: str | None, stored: bool = True) -> ModeOptions:
        op = "op" if mode == "merge" else None
        built = ModeOptions.build(mode, "id", op, order, None, ["id", "op", "ts"])
        return replace(built, order_stored=stored)

    assert keeps_deletes(options("merge", "ts")) and keeps_deletes(options("upsert", "ts"))
    assert not keeps_deletes(options("merge", None))
    assert not keeps_deletes(options("merge", "ts", stored=False))


def test_a_plan_naming_its_tombstones_round_trips_and_older_plans_read_without():
    assert ApplyPlan.from_json(MERGE.to_json()) == MERGE
    raw = json.loads(MERGE.to_json())
    assert raw["tombs"] == {"name": TOMB, "schema": "app"}
    del raw["tombs"]
    assert ApplyPlan.from_json(json.dumps(raw)) == replace(MERGE, tombs=None)


def test_a_plan_naming_another_table_for_its_tombstones_is_refused():
    check_tombs(MERGE)
    check_tombs(replace(MERGE, tombs=None))
    check_tombs(temporary_stage(MERGE, PG))  # a one-phase job's: the same table
    hostile = [TableRef("users", "app"), TableRef(TOMB, "journal"), TableRef(TOMB, "elsewhere")]
    for tombs in hostile:
        with pytest.raises(JournalError, match="not the table xasink keeps"):
            check_tombs(replace(MERGE, tombs=tombs))


def test_a_merge_keeps_its_deletes_order_between_its_deletes_and_its_inserts():
    delete, leave, forget, insert = apply_statements(PG, MERGE)
    assert delete[0].startswith('DELETE FROM "app"."events" AS "xasink_stored" USING')
    tombs = f'"app"."{TOMB}"'
    held = 'EXISTS (SELECT 1 FROM "app"."events" x WHERE s."id" = x."id")'
    assert leave == (
        f'INSERT INTO {tombs} AS "xasink_stored" ("id", "xasink_order", "xasink_deleted_at") '
        f'SELECT s."id", s."ts", clock_timestamp() FROM ({LATEST_PG}) s WHERE s."xasink_op" '
        f'IN (?) AND NOT {held} ON CONFLICT ("id") DO UPDATE SET "xasink_deleted_at" = '
        'EXCLUDED."xasink_deleted_at", "xasink_order" = EXCLUDED."xasink_order" WHERE '
        '"xasink_stored"."xasink_order" IS NULL OR "xasink_stored"."xasink_order" < '
        'EXCLUDED."xasink_order"',
        ("d",),
    )
    assert forget == (
        f'DELETE FROM {tombs} AS t USING ({LATEST_PG}) s WHERE s."id" = t."id" AND '
        f's."xasink_op" NOT IN (?) AND (t."xasink_order" < s."ts" OR {held})',
        ("d",),
    )
    assert insert[0].endswith(
        f'WHERE s."xasink_op" NOT IN (?) AND NOT EXISTS (SELECT 1 FROM {tombs} t WHERE '
        's."id" = t."id") ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name", "ts" = '
        'EXCLUDED."ts" WHERE "xasink_stored"."ts" IS NULL OR "xasink_stored"."ts" < EXCLUDED."ts"'
    )
    assert stale_statement(PG, MERGE) == (
        f'SELECT COUNT(*) FROM ({LATEST_PG}) s LEFT JOIN "app"."events" o ON s."id" = o."id" '
        f'LEFT JOIN {tombs} t ON s."id" = t."id" WHERE NOT (o."ts" IS NULL OR o."ts" < s."ts") '
        'OR (o."id" IS NULL AND t."xasink_order" >= s."ts")',
        (),
    )


def test_mysql_keeps_the_order_of_deletes_with_its_own_statements():
    _, leave, forget, insert = apply_statements(MY, MERGE)
    tombs = f"`app`.`{TOMB}`"
    newer = f"({tombs}.`xasink_order` IS NULL OR {tombs}.`xasink_order` < VALUES(`xasink_order`))"
    assert leave[0].endswith(
        f"ON DUPLICATE KEY UPDATE `xasink_deleted_at` = IF({newer}, VALUES(`xasink_deleted_at`), "
        f"{tombs}.`xasink_deleted_at`), `xasink_order` = IF({newer}, VALUES(`xasink_order`), "
        f"{tombs}.`xasink_order`)"
    )
    assert "SELECT s.`id`, s.`ts`, UTC_TIMESTAMP(6) FROM" in leave[0]
    assert forget[0].startswith(f"DELETE t FROM {tombs} AS t JOIN ({LATEST_MY}) s ON")
    assert f"NOT EXISTS (SELECT 1 FROM {tombs} t WHERE s.`id` = t.`id`)" in insert[0]


def test_an_upsert_with_order_honours_deletes_but_changes_none():
    """An upsert deletes nothing: it reads the tombstones (where a merge made them), and
    writes none, so a login that may only read them can upsert."""
    upsert = replace(MERGE, mode="upsert", op_values=())
    (insert,) = apply_statements(PG, upsert)
    held = 'EXISTS (SELECT 1 FROM "app"."events" x WHERE s."id" = x."id")'
    assert (
        f' s WHERE ({held} OR NOT EXISTS (SELECT 1 FROM "app"."{TOMB}" t WHERE s."id" = t."id" '
        'AND t."xasink_order" >= s."ts")) ON CONFLICT'
    ) in insert[0]
    assert insert[0].startswith('INSERT INTO "app"."events" AS "xasink_stored"')
    plain = apply_statements(PG, replace(upsert, tombs=None))
    assert len(plain) == 1 and "xasink_tomb" not in plain[0][0]
