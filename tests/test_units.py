"""Pure-Python parts: XIDs, masking, table names, jar discovery. No server needed."""

from __future__ import annotations

import base64
import re

import pytest

from xasink import FORMAT_ID, BranchId, Xid
from xasink.errors import ConfigurationError, DriverNotFoundError
from xasink.masking import Redactor, mask_url
from xasink.runtime.jars import find_driver_jar, resolve_classpath
from xasink.spec import ConnectionSpec, TableRef

JOB = "0123456789abcdef0123456789abcdef"


def test_format_id_is_a_positive_31_bit_integer():
    assert 0 < FORMAT_ID < 2**31


def test_branch_xid_round_trips_and_fits_xa_limits():
    branch = BranchId("a1b2c3d4", JOB, 2**31 - 1, 2**63 - 1)
    xid = branch.xid
    assert xid.format_id == FORMAT_ID
    assert len(xid.gtrid) <= 64 and len(xid.bqual) <= 64
    assert BranchId.parse(xid) == branch
    assert BranchId.parse(Xid.from_string(str(xid))) == branch


def test_attempts_of_one_partition_never_collide():
    xids = {BranchId("a1b2c3d4", JOB, 7, attempt).xid for attempt in range(100)}
    assert len(xids) == 100


@pytest.mark.parametrize(
    "xid",
    [
        Xid(1, b"xasink1:a1b2c3d4:" + JOB.encode(), b"p0:a0"),  # another formatId
        Xid(FORMAT_ID, b"something-else", b"p0:a0"),  # our formatId, foreign layout
        Xid(FORMAT_ID, b"xasink1:a1b2c3d4:" + JOB.encode(), b"p00:a0"),  # non-canonical
        Xid(FORMAT_ID, b"xasink1:a1b2c3d4:" + JOB.encode() + b"x", b"p0:a0"),
        Xid(FORMAT_ID, b"xasink1:A1B2C3D4:" + JOB.encode(), b"p0:a0"),
    ],
)
def test_foreign_xids_are_not_ours(xid):
    assert BranchId.parse(xid) is None


def test_xid_ranges_are_checked():
    with pytest.raises(ValueError):
        Xid(-1, b"g", b"b")
    with pytest.raises(ValueError):
        Xid(2**31, b"g", b"b")
    with pytest.raises(ValueError):
        Xid(1, b"g" * 65, b"b")
    with pytest.raises(ValueError):
        BranchId("zz", JOB, 0, 0)


def test_pgjdbc_gid_format():
    xid = Xid.from_parts(42, "gtrid", "bq")
    gid = f"42_{base64.b64encode(b'gtrid').decode()}_{base64.b64encode(b'bq').decode()}"
    assert str(xid) == gid
    assert Xid.from_string(gid) == xid
    for bad in ("foreign-app-1", "1_!!_xx", "x_YQ==_YQ=="):
        with pytest.raises(ValueError):
            Xid.from_string(bad)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "jdbc:postgresql://h/db?user=u&password=p%40ss&ssl=true",
            "jdbc:postgresql://h/db?user=u&password=***&ssl=true",
        ),
        ("jdbc:mysql://u:pw@h:3306/db", "jdbc:mysql://u:***@h:3306/db"),
        (
            "jdbc:sqlserver://h;user=u;password=x;db=d",
            "jdbc:sqlserver://h;user=u;password=***;db=d",
        ),
    ],
)
def test_mask_url(url, masked):
    assert mask_url(url) == masked


def test_redactor_hides_plain_and_url_encoded_secrets():
    redact = Redactor(["s3cr3t-Pa55word!", None])
    text = "login s3cr3t-Pa55word! failed for jdbc:x://h/d?password=s3cr3t-Pa55word%21"
    cleaned = redact(text)
    assert "s3cr3t" not in cleaned and "Pa55" not in cleaned


def test_spec_repr_has_no_password():
    spec = ConnectionSpec("jdbc:postgresql://h/d?password=inurl", "u", "hidden-pw")
    assert "hidden-pw" not in repr(spec) and "inurl" not in repr(spec)


def test_table_names():
    assert TableRef.parse("t") == TableRef("t")
    assert TableRef.parse("s.t") == TableRef("t", "s")
    assert TableRef.parse(("s.x", "t.y")) == TableRef("t.y", "s.x")
    for bad in ("", ("a", "b", "c"), "a\x00b"):
        with pytest.raises(ConfigurationError):
            TableRef.parse(bad)


def test_jar_discovery_prefers_the_newest_version(tmp_path):
    for name in ("postgresql-42.2.1.jar", "postgresql-42.7.3.jar", "other.jar"):
        (tmp_path / name).write_bytes(b"")
    assert find_driver_jar("postgres", [tmp_path]).endswith("postgresql-42.7.3.jar")
    assert find_driver_jar("mariadb", [tmp_path]) is None


def test_explicit_jars_win_and_must_exist(tmp_path):
    jar = tmp_path / "custom-driver.jar"
    jar.write_bytes(b"")
    assert resolve_classpath(("postgres",), [str(jar)]) == [str(jar)]
    with pytest.raises(DriverNotFoundError, match=re.escape("missing.jar")):
        resolve_classpath(("postgres",), [str(tmp_path / "missing.jar")])


def test_check_cache_expires_and_forgets_per_connection():
    from xasink.driver.checks import CheckCache

    now = [0.0]
    cache = CheckCache(ttl=60, clock=lambda: now[0])
    one = ConnectionSpec(url="jdbc:postgresql://h/a", dialect="postgres")
    two = ConnectionSpec(url="jdbc:postgresql://h/b", dialect="postgres")
    cache.put(one, "server", 4)
    cache.put(two, "server", 2)
    now[0] = 59.9
    assert cache.get(one, "server") == 4
    with pytest.raises(RuntimeError), cache.forgotten_on_failure(one):
        raise RuntimeError("the call failed")
    assert cache.get(one, "server") is None and cache.get(two, "server") == 2
    now[0] = 60.0
    assert cache.get(two, "server") is None and len(cache) == 0
    uncached = CheckCache(ttl=0)
    uncached.put(one, "server", 4)
    assert uncached.get(one, "server") is None


# -- the benchmark harness's stream workload (no Spark, no server) ----------------------------
def test_stream_workloads_parse_and_are_in_the_default_run():
    from benchmarks.run import DEFAULT_WORKLOADS, QUICK_WORKLOADS
    from benchmarks.workloads import parse_workloads

    (stream,) = parse_workloads(["stream-1k"], partitions=4)
    assert (stream.rows, stream.partitions, stream.is_stream) == (1000, 1, True)
    assert stream.total_batches == stream.batches + stream.warmup_batches
    assert stream.warmup_batches > 0 and stream.warmups == 0
    assert not parse_workloads(["narrow-1k"], 4)[0].is_stream
    assert "stream-1k" in DEFAULT_WORKLOADS and "stream-1k" not in QUICK_WORKLOADS
    with pytest.raises(ValueError, match="at least one row"):
        parse_workloads(["stream-0"], 4)


def _progress(batch_id: int, rows: int, start_ms: int, trigger_ms: int) -> dict:
    second, ms = divmod(start_ms, 1000)
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "timestamp": f"2024-01-01T00:00:{second:02d}.{ms:03d}Z",
        "durationMs": {"triggerExecution": trigger_ms, "addBatch": trigger_ms - 100},
    }


def test_stream_timings_cover_the_timed_batches_only():
    from benchmarks.measure import Timing
    from benchmarks.streams import batches_from_progress, stream_detail, summarise_streams

    # Batches 0-1 are warm-ups; 2-4 start a second apart and take 500 ms each. A no-data
    # trigger at the end is no batch.
    progress = [_progress(b, 10, b * 1000, 5000 if b == 0 else 500) for b in range(5)]
    progress.append(_progress(5, 0, 5000, 20))
    batches = batches_from_progress(progress, {2: 0.3, 3: 0.2, 4: 0.25, 0: 9.0})
    seconds, detail = stream_detail(batches, expected=5, warmups=2, rows_per_batch=10)
    assert seconds == pytest.approx(2.5)  # from batch 2's start (2.0 s) to 4's end (4.5 s)
    assert detail["batches_per_second"] == pytest.approx(3 / 2.5)
    assert (detail["median_batch_ms"], detail["median_write_ms"]) == (500, 250)
    assert detail["write_measure"] == "foreachBatch call"
    with pytest.raises(AssertionError, match="other than 20 rows"):
        stream_detail(batches, expected=5, warmups=2, rows_per_batch=20)
    with pytest.raises(AssertionError, match=re.escape("expected 0..5")):
        stream_detail(batches, expected=6, warmups=2, rows_per_batch=10)

    def run(round_no: int, error: str | None = None) -> Timing:
        return Timing(
            "postgres", "stream-1k", "write_xa", round_no, False, 30, None if error else seconds,
            error, {} if error else detail,
        )  # fmt: skip

    (summary,) = summarise_streams([run(1), run(2), run(3, "boom")], {"stream-1k"})
    assert summary.seconds == [2.5, 2.5] and summary.failures == 1
    assert summary.batch_ms == [500.0] * 6  # the timed batches of both good queries
    assert summary.batches_per_second == pytest.approx(1.2)
    assert summary.median_write_ms == 250
