"""Two tables linked by a foreign key, written in one transaction, through a driver kill.

    make demo                                        # throwaway PostgreSQL
    XASINK_DEMO_URL=jdbc:postgresql://h:5432/db XASINK_DEMO_USER=u XASINK_DEMO_PASSWORD=pw \\
        python examples/transaction_demo.py

A driver writes orders (the child, first) and their customers (the parent) in one
`xasink.transaction`, and is killed with SIGKILL after the commit decision, once one branch
has committed. Readers see neither table changed; `xasink recover` then applies both in one
local transaction, parents first. The demo creates and drops `xasink_demo_customers` and
`xasink_demo_orders`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from demo import database

from xasink import Database, WriterProperties

CUSTOMERS, ORDERS = 1_000, 5  # orders per customer
PARENT, CHILD = "xasink_demo_customers", "xasink_demo_orders"
POINT = "after_first_commit"


def drive(url: str, user: str) -> None:
    """The driver (a child process): one transaction, killed at POINT."""
    from support import spark_builder

    from xasink import transaction
    from xasink._testing.faults import Fault, injected

    spark = spark_builder("xasink-transaction-demo").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    customers = spark.range(CUSTOMERS).selectExpr("id", "concat('customer ', id) AS name")
    orders = spark.range(CUSTOMERS * ORDERS).selectExpr(
        "id", f"id DIV {ORDERS} AS customer_id", "id * 1.5 AS amount"
    )
    password = os.environ.get("XASINK_DEMO_PASSWORD")
    with (
        injected(Fault(POINT, "hang", attempt_number=None)),
        transaction(Database(url, user=user, password=password)) as tx,
    ):
        tasks = WriterProperties(driver_write_bytes=0)  # Spark tasks write, not the driver
        two_tasks = WriterProperties(max_branches=2, driver_write_bytes=0)
        tx.write(orders, CHILD, writer_properties=two_tasks)
        tx.write(customers, PARENT, mode="upsert", key="id", writer_properties=tasks)


def counts(connect: object) -> tuple[int, int, int, int]:
    """(customers, orders, orders without their customer, prepared transactions)."""
    with connect() as conn:  # type: ignore[operator]
        return conn.execute(
            f"SELECT (SELECT count(*) FROM {PARENT}), (SELECT count(*) FROM {CHILD}), "
            f"(SELECT count(*) FROM {CHILD} o LEFT JOIN {PARENT} c ON c.id = o.customer_id "
            "WHERE c.id IS NULL), (SELECT count(*) FROM pg_prepared_xacts)"
        ).fetchone()


def main() -> int:
    with database() as (url, user, password, connect):
        with connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {CHILD}, {PARENT}")
            conn.execute(f"CREATE TABLE {PARENT} (id BIGINT PRIMARY KEY, name TEXT)")
            conn.execute(
                f"CREATE TABLE {CHILD} (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL "
                f"REFERENCES {PARENT} (id), amount DOUBLE PRECISION)"
            )
        env = {**os.environ, "XASINK_DEMO_PASSWORD": password or ""}
        print(
            f"a driver writes {CUSTOMERS * ORDERS} orders, then {CUSTOMERS} customers, in one "
            f"transaction; it is killed at {POINT}"
        )
        driver = subprocess.Popen(
            [sys.executable, __file__, "--drive", url, user or ""],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert driver.stdout is not None
        for line in driver.stdout:
            if line.startswith(f"XASINK-FAULT {POINT}"):
                os.killpg(driver.pid, signal.SIGKILL)
                break
        driver.wait()
        print(f"fault: the driver was SIGKILLed at {POINT}, once one branch had committed")
        seen = counts(connect)
        print(f"a reader sees {seen[0]} customers and {seen[1]} orders: neither table changed")
        recover = [sys.executable, "-m", "xasink", "recover", "--url", url, "--grace", "0"]
        recover += ["--user", user, "--password-env", "XASINK_DEMO_PASSWORD"] if user else []
        print("$ xasink recover --url ... --grace 0")
        done = subprocess.run(recover, env=env, capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr.strip())
        customers, orders, orphans, prepared = counts(connect)
        with connect() as conn:
            conn.execute(f"DROP TABLE {CHILD}, {PARENT}")
    ok = seen[:2] == (0, 0) and (customers, orders, orphans, prepared) == (
        CUSTOMERS,
        CUSTOMERS * ORDERS,
        0,
        0,
    )
    print(
        f"verified with psycopg: {customers} customers, {orders} orders, {orphans} orders "
        f"without their customer, {prepared} prepared transactions left -> "
        f"{'ALL OR NOTHING, EXACTLY ONCE: OK' if ok and done.returncode == 0 else 'FAILED'}"
    )
    return 0 if ok and done.returncode == 0 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--drive"]:
        drive(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
