"""TLS: every connection xasink opens verifies the server's certificate when told to.

A PostgreSQL and a MariaDB of their own, each with a certificate signed by a throwaway CA,
refuse any connection without TLS (PostgreSQL's pg_hba `hostnossl ... reject`, MariaDB's
`require_secure_transport`): so every write below proves that the driver's journal
connection, the executors' branches and the command's recovery all spoke TLS. The URL asks
for the strictest check each driver has (pgjdbc's `sslmode=verify-full`, MariaDB
Connector/J's `useSsl` with `serverSslCert`, whose host name check is on by default). A
CA that did not sign the server's certificate, or a certificate for another host, is
refused before anything is written, with what to change. Rows are read with
psycopg/pymysql, over TLS too; nothing may be left prepared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import servers
from certificates import ServerCertificate, hand_to, issue
from support import (
    assert_clean,
    assert_exactly,
    connection_args,
    events_df,
    job_states,
    new_table,
    run_sql,
    start_foreach_stream,
    stream_files,
    xasink_cli,
)

from xasink import PreflightError, WriterProperties, transaction, write_xa

KINDS = ("postgres", "mariadb")
#: Every row through the executors' branches (no small frame written by the driver).
BRANCHES = WriterProperties(driver_write_bytes=0, max_branches=2)


@dataclasses.dataclass(frozen=True)
class TlsServer:
    """A server that takes TLS connections only, its certificate and a CA that did not
    sign it."""

    server: servers.DbServer
    made: ServerCertificate
    stranger: ServerCertificate

    def verified(self, ca: Path | None = None) -> servers.DbServer:
        """The server as reached by a URL that checks its certificate against `ca` (the
        CA that signed it by default) and its host name."""
        ca = ca or self.made.ca
        query = (
            f"sslmode=verify-full&sslrootcert={ca}"
            if self.server.kind == "postgres"
            else f"useSsl=true&serverSslCert={ca}"
        )
        return dataclasses.replace(self.server, url_query=query)


def _client_options(kind: str, ca: Path) -> tuple[tuple[str, object], ...]:
    """psycopg's or pymysql's own verified TLS, for the test's independent reads."""
    if kind == "postgres":
        return (("sslmode", "verify-full"), ("sslrootcert", str(ca)))
    return (("ssl", {"ca": str(ca), "check_hostname": True}),)


@contextlib.contextmanager
def _tls_only(kind: str, made: ServerCertificate) -> Iterator[servers.DbServer]:
    """A new server of `kind` that presents `made`'s certificate and refuses plain TCP."""
    if kind == "postgres":
        with servers.start_postgres(
            ssl="on", ssl_cert_file=str(made.cert), ssl_key_file=str(made.key)
        ) as server:
            with server.admin_connect() as conn:
                hba = str(conn.execute("SHOW hba_file").fetchone()[0])
                Path(hba).write_text(
                    "local all all trust\n"
                    "hostnossl all all 0.0.0.0/0 reject\n"
                    "hostnossl all all ::/0 reject\n"
                    "hostssl all all 0.0.0.0/0 scram-sha-256\n"
                    "hostssl all all ::/0 scram-sha-256\n"
                )
                conn.execute("SELECT pg_reload_conf()")
            yield server
        return
    with servers.start_mariadb(
        ssl_ca=str(made.ca), ssl_cert=str(made.cert), ssl_key=str(made.key)
    ) as server:
        run_sql(server, "SET GLOBAL require_secure_transport = ON")
        yield server


@pytest.fixture(scope="module", params=KINDS)
def tls(request) -> Iterator[TlsServer]:
    folder = Path(tempfile.mkdtemp(prefix="xasink-tls-"))
    try:
        made = issue(folder, "trusted")
        stranger = issue(folder, "stranger")
        owner = servers._run_as()
        if owner is not None:
            hand_to(made, owner.pw_uid, owner.pw_gid)
        with _tls_only(request.param, made) as server:
            yield TlsServer(
                dataclasses.replace(server, client_options=_client_options(request.param, made.ca)),
                made,
                stranger,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _jobs(server: servers.DbServer) -> dict[str, str]:
    """The journal's jobs, none where no write made it yet."""
    try:
        return job_states(server)
    except Exception:  # no journal on this server yet
        return {}


def test_plain_tcp_is_refused_so_every_write_below_spoke_tls(tls):
    """The premise the other tests rest on: a connection without TLS is refused."""
    plain = dataclasses.replace(tls.server, client_options=())
    options = {"sslmode": "disable"} if plain.kind == "postgres" else {"ssl_disabled": True}
    with pytest.raises(Exception) as refused:
        plain.connect(**options).close()
    said = str(refused.value)
    # MariaDB answers a plain login of a TLS-only server as a wrong password (1045).
    assert any(w in said for w in ("no encryption", "secure transport", "(1045,")), said
    tls.server.connect().close()  # the same login over TLS is taken


def test_a_write_a_transaction_a_stream_and_recovery_verify_the_certificate(spark, tls, tmp_path):
    db = tls.verified()
    table = new_table(db)
    write_xa(
        events_df(spark, 1000, 3), **connection_args(db), table=table, writer_properties=BRANCHES
    )
    write_xa(events_df(spark, 1020, 1).where("id >= 1000"), **connection_args(db), table=table)
    assert_exactly(db, table, range(1020))

    parents, children = new_table(db, "parent"), new_table(db, "child")
    with transaction(**connection_args(db)) as tx:
        tx.write(events_df(spark, 300, 2), parents, writer_properties=BRANCHES)
        tx.write(events_df(spark, 30, 1), children)
    assert_exactly(db, parents, range(300))
    assert_exactly(db, children, range(30))

    streamed = new_table(db, "stream")
    stream_files(tmp_path / "in", batches=2, per_batch=50)

    def write(batch, batch_id: int) -> None:
        write_xa(batch, **connection_args(db), table=streamed)

    start_foreach_stream(spark, tmp_path / "in", tmp_path / "checkpoint", write).awaitTermination()
    assert_exactly(db, streamed, range(100))

    recovered = xasink_cli(db, "recover")
    assert recovered.returncode == 0, recovered.stderr
    assert set(job_states(db).values()) == {"committed"}
    assert_clean(db)


def test_a_ca_that_did_not_sign_the_certificate_is_refused_with_nothing_written(spark, tls):
    trusted = tls.verified()
    table = new_table(trusted)
    jobs = _jobs(trusted)
    db = tls.verified(tls.stranger.ca)
    with pytest.raises(PreflightError) as refused:
        write_xa(events_df(spark, 100, 2), **connection_args(db), table=table)
    message = str(refused.value)
    assert "certificate" in message and str(tls.stranger.ca) in message, message
    run = xasink_cli(db, "recover")
    assert run.returncode != 0 and "certificate" in run.stderr, run.stderr
    assert_exactly(trusted, table, [])
    assert _jobs(trusted) == jobs
    assert_clean(trusted)
