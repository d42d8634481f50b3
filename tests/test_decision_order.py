"""Decisions of one coordinator that meet in a participant reach every database in one order
(review 5, D1).

The coordinator orders decisions by their stamp (`decided_at`); a participant by when each
decision's copy arrived there. A decision whose stamp is taken first but whose transaction
commits later is invisible to a later decision's driver, which then copies its own first:
the two databases applied the two transactions in opposite orders and kept different rows,
both `committed`, `xasink check` healthy. Here the first decision is held open right after
its stamp (a GC pause, a slow network) while the second one decides.

Rows are read with psycopg/pymysql; each case ends with no prepared branch and no staging
table in either database.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from support import in_background, job_states
from test_participants import _clean, _in, _kv, _links, _recover, _value
from test_transaction import PATHS

from xasink import transaction
from xasink._testing.faults import Fault, held, injected, release


def _upserts(spark, coordinator, c_table: str, participant, p_table: str, value: str):
    """One transaction: key 1 of the coordinator's table and of the participant's set to
    `value` (staged upserts, tasks' branches)."""
    rows = spark.createDataFrame([(1, value)], "id long, v string")
    with transaction(**_in(coordinator)) as tx:
        tx.write(rows, c_table, mode="upsert", key="id", **PATHS["tasks"])
        tx.write(rows, p_table, mode="upsert", key="id", **_in(participant, **PATHS["tasks"]))
    return tx


def _deciding_behind_another(server) -> bool:
    """A decision waits for an earlier one's transaction to end (the journal's order lock)."""
    with server.admin_connect() as conn:
        cursor = conn.cursor()
        if server.kind == "postgres":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s",
                ("%xasink_meta%",),
            )
        else:
            cursor.execute(
                "SELECT count(*) FROM information_schema.innodb_trx "
                "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s",
                ("%xasink_meta%",),
            )
        return int(cursor.fetchone()[0]) > 0


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("coordinator", ["postgres", "mariadb"])
def test_a_decision_held_open_after_its_stamp_keeps_both_databases_in_one_order(
    spark, postgres, mariadb, coordinator
):
    """T1's decision is held open after its stamp. T2 then decides: before the fix it
    decided, copied its decision to the participant and went on to phase 2, where the test
    holds it; T1 was released, committed its decision, and was copied to the participant
    after T2's. Each database applied them in its own order: the coordinator kept T2's
    row (stamp order), the participant T1's (copy order). Now T2's decision waits for T1's
    to commit, so its stamp is later and every database applies T1, then T2."""
    c, p = (postgres, mariadb) if coordinator == "postgres" else (mariadb, postgres)
    c_table, p_table = _kv(c), _kv(p)
    stamped = Fault("after_decision_stamp", "hold", attempt_number=None)
    phase_two = Fault("after_decision", "hold", attempt_number=None)
    with injected(stamped, phase_two) as (stamped, phase_two):
        first, t1 = in_background(lambda: _upserts(spark, c, c_table, p, p_table, "T1"))
        _until(lambda: held(stamped) or not first.is_alive(), "T1's decision held")
        second, t2 = in_background(lambda: _upserts(spark, c, c_table, p, p_table, "T2"))
        _until(
            lambda: held(phase_two) or _deciding_behind_another(c) or not second.is_alive(),
            "T2 decided (held before phase 2), or waiting behind T1's decision",
        )
        release(stamped)
        # One of them is held before its phase 2; the other finishes meanwhile.
        _until(lambda: not first.is_alive() or not second.is_alive(), "a transaction ended")
        release(phase_two)
        first.join(240)
        second.join(240)
    assert [type(t[0]).__name__ for t in (t1, t2)] == ["Transaction"] * 2, (t1, t2)
    jobs = [t1[0].job_id, t2[0].job_id]
    assert (_value(c, c_table), _value(p, p_table)) == ("T2", "T2")
    for server in (c, p):
        assert [job_states(server)[j] for j in jobs] == ["committed"] * 2, server.kind
    assert [_links(c)[f"{j}:participant"] for j in jobs] == ["done"] * 2
    done = _recover(c, participants=[p])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (_value(c, c_table), _value(p, p_table)) == ("T2", "T2")
    _clean(c, p)
