"""A transaction's staged plan in the journal: its text, who may trust it, and which other
jobs it waits for. Pure: no database."""

from __future__ import annotations

import json

import pytest

from xasink.dialects import get_dialect
from xasink.errors import JournalError
from xasink.protocol import applying
from xasink.protocol.applying import JobOrderError, trusted_plan
from xasink.protocol.jobtables import SEVERAL_WRITES
from xasink.protocol.schema import JournalLayout
from xasink.spec import TableRef
from xasink.tables.applier import STAGED_APPLY
from xasink.tables.staging import ApplyPlan, ApplyPlans, stage_name

JOB = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32
JOURNAL = JournalLayout("postgres", None, "abcd1234")
ORDERS, ITEMS = TableRef("orders", "public"), TableRef("items", "public")


def _plan(target: TableRef, index: int = 0, job: str = JOB, mode: str = "append") -> ApplyPlan:
    return ApplyPlan(mode, target, stage_name(job, None, index), ("id",))


def _both(job: str = JOB) -> ApplyPlans:
    return ApplyPlans((_plan(ORDERS, 0, job), _plan(ITEMS, 1, job)))


def test_one_write_keeps_the_single_plans_text_and_several_start_with_their_prefix():
    one = ApplyPlans((_plan(ORDERS),))
    assert one.to_json() == _plan(ORDERS).to_json()
    text = _both().to_json()
    assert text.startswith(SEVERAL_WRITES)
    assert ApplyPlans.from_json(text) == _both()
    assert ApplyPlans.from_json(one.to_json()) == one
    assert [str(s) for s in _both().stages] == [f"xasink_stage_{JOB}", f"xasink_stage_{JOB}_1"]


def test_plans_together_are_none_one_or_several():
    assert ApplyPlans.together([None, None]) is None
    assert ApplyPlans.together([None, _plan(ORDERS)]) == _plan(ORDERS)
    assert ApplyPlans.together([_plan(ORDERS), None, _plan(ITEMS, 1)]) == ApplyPlans(
        (_plan(ORDERS), _plan(ITEMS, 1))
    )


def test_a_transactions_row_is_trusted_under_any_of_its_tables():
    text = _both().to_json()
    assert trusted_plan(JOURNAL, JOB, text, "public.items", STAGED_APPLY) == _both()
    assert trusted_plan(JOURNAL, JOB, text, "public.orders", STAGED_APPLY) == _both()


@pytest.mark.parametrize(
    ("plans", "table"),
    [
        (_both(OTHER), "public.orders"),  # another job's staging tables
        (ApplyPlans((_plan(ORDERS, 0), _plan(ITEMS, 0))), "public.orders"),  # one stage twice
        (ApplyPlans((_plan(ORDERS, 1), _plan(ITEMS, 0))), "public.orders"),  # misnumbered
        (_both(), "public.users"),  # a table the plan does not change
    ],
)
def test_a_row_naming_tables_xasink_would_not_make_is_refused(plans, table):
    with pytest.raises(JournalError, match="not what xasink creates"):
        trusted_plan(JOURNAL, JOB, plans.to_json(), table, STAGED_APPLY)


def test_a_transaction_waits_for_an_older_job_on_any_of_its_tables():
    """The rows the order checks read: (job, target_table, apply_plan). A one-table job
    on items blocks a transaction on orders and items; so does a transaction whose first
    table is another one but whose plan holds items; one on users does not."""
    mine = _both()
    users = TableRef("users", "public")
    blocker = ApplyPlans((_plan(users, 0, OTHER), _plan(ITEMS, 1, OTHER))).to_json()
    with pytest.raises(JobOrderError, match=r"public\.items") as caught:
        applying._raise_first_sharing(
            JOURNAL,
            [("a" * 32, "public.users", _plan(users).to_json()), (OTHER, "public.users", blocker)],
            mine,
            STAGED_APPLY,
        )
    assert caught.value.blocker == OTHER
    applying._raise_first_sharing(
        JOURNAL, [("a" * 32, "public.users", json.dumps({"x": 1}))], mine, STAGED_APPLY
    )


def test_apply_locks_cover_every_table_in_one_order():
    assert applying._apply_keys(_both()) == [
        "apply:public\x00items",
        "apply:public\x00orders",
    ]


def test_a_transaction_deletes_children_first_and_inserts_parents_first(monkeypatch):
    """items references orders; the writes came child first. Deleting a parent row before
    its children, or inserting a child before its parent, would break the key."""
    from xasink.dialects import get_dialect
    from xasink.tables import applier

    ran: list[str] = []
    monkeypatch.setattr(
        applier, "query", lambda conn, sql, params: [("public", "items", "public", "orders")]
    )
    monkeypatch.setattr(applier, "execute", lambda conn, sql, params=(): ran.append(sql) or 1)
    plans = ApplyPlans((_plan(ITEMS, 0, mode="overwrite"), _plan(ORDERS, 1, mode="overwrite")))
    assert applier.apply_all(None, get_dialect("postgres"), plans) == (4, 0)  # none stale
    assert [sql.split(" (")[0] for sql in ran] == [
        'DELETE FROM "public"."items"',
        'DELETE FROM "public"."orders"',
        'INSERT INTO "public"."orders"',
        'INSERT INTO "public"."items"',
    ]


def test_another_schemas_same_named_keys_are_not_ours(monkeypatch):
    """Review 4, R4: the catalog names old.parent -> old.child beside our items -> orders;
    read by name alone it made a false cycle, and the child's INSERT ran first."""
    from xasink.tables import applier

    rows = [("public", "items", "public", "orders"), ("old", "orders", "old", "items")]
    monkeypatch.setattr(applier, "query", lambda conn, sql, params: rows)
    plans = [_plan(ITEMS, 0), _plan(ORDERS, 1)]
    ordered = applier.parents_first(None, get_dialect("postgres"), plans)
    assert [p.target for p in ordered] == [ORDERS, ITEMS]
