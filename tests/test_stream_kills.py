"""A foreachBatch stream whose driver is SIGKILLed (the whole process group) again and again,
and restarted from its checkpoint until the input is consumed: once at the point between
the sink's commit and Spark's commit log, then at random moments (seeded, see
chaos_support; CI kills 2 times on PostgreSQL, `make chaos` 30 times on every database).

Each batch is appended to one table and merged, as a change feed, into another that stores
its order column, with some changes late (older than the key's changes of earlier batches).
At the end the append table holds exactly the input ids, the merge table exactly the state
per key that the newest change of each wins (batch by batch, as Spark cut them), and, after
`xasink recover --grace 0`, no branch or staging table is left.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from chaos_support import FULL, leftovers, rng
from stream_driver import expected_merge, launch
from support import (
    assert_exactly,
    cli,
    contents,
    new_table,
    old_contents,
    seeded_table,
    sink_mark,
    stream_files,
)

KILLS = int(os.environ.get("XASINK_STREAM_KILLS") or (30 if FULL else 2))
FILES, PER_FILE = KILLS + 10, 100


def batches_of(checkpoint: Path) -> dict[int, int]:
    """Batch id -> how many input files Spark gave it, from its checkpoint: the file
    source's offset is a position in its own log of file entries (one file each here).

    Spark does not promise one file per batch across a crash: a driver killed after the
    source logged its next entry, but before the batch's offsets were written, plans the
    next batch over both entries (seen: 20 files in 19 batches). So the sink's mark is
    checked against Spark's own record of its batches, never against the file count."""
    offsets = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            source = json.loads(path.read_text().splitlines()[2])
            offsets[int(path.name)] = int(source["logOffset"])
    ordered = sorted(offsets)
    return {b: offsets[b] - (offsets[ordered[i - 1]] if i else -1) for i, b in enumerate(ordered)}


def last_committed(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_a_stream_survives_driver_kills(db, tmp_path):
    if not FULL and db.kind != "postgres":
        pytest.skip("full chaos run only (XASINK_CHAOS_FULL=1): CI kills on PostgreSQL")
    random = rng(f"stream-kills-{db.kind}")
    table, merge_table = new_table(db), seeded_table(db, order="seq")
    sink = f"kills-{uuid.uuid4().hex[:8]}"
    stream_files(tmp_path / "in", FILES, PER_FILE)
    config = {
        "url": db.jdbc_url,
        "user": db.user,
        "source": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "table": table,
        "merge_table": merge_table,
        "sink": sink,
    }
    # Killed after the sink committed batch 0, before Spark's commit log has it.
    driver = launch(config, db.password, stop_after_commit=True)
    assert driver.wait_for("XASINK-FAULT after_sink_commit"), driver.tail()
    driver.kill()
    assert sink_mark(db, f"{sink}-append")[0] == 0
    kills, runs = 1, 1
    while kills <= KILLS:
        driver, runs = launch(config, db.password), runs + 1
        if random.random() < 0.2:  # anywhere, start-up and replay included
            consumed = driver.wait_for("CONSUMED", timeout=random.uniform(0, 8))
        else:  # inside a batch: its writes, decisions and phase 2
            assert driver.wait_for(("BATCH", "CONSUMED")), driver.tail()
            consumed = driver.wait_for("CONSUMED", timeout=random.uniform(0, 4))
        if consumed:
            break
        driver.kill()
        kills += 1
    if not driver.wait_for("CONSUMED", timeout=600):  # the last run was killed: once more
        driver = launch(config, db.password)
        assert driver.wait_for("CONSUMED", timeout=600), driver.tail()
    assert driver.finish() == 0, driver.tail()
    print(f"stream on {db.kind}: {kills} kills in {runs} runs")
    assert kills > KILLS, f"the input ran out after {kills} kills; add batches"

    # A run killed after its tasks prepared leaves those branches to recovery: its job looks
    # alive for the grace period, which the last run may not outlast. Recovery, as an
    # operator runs it once every driver is gone, ends such jobs; then nothing may be left.
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    ids = range(FILES * PER_FILE)
    assert_exactly(db, table, ids)
    checkpoint = tmp_path / "checkpoint"
    files = batches_of(checkpoint)
    assert sum(files.values()) == FILES
    ends = [sum(files[b] for b in sorted(files) if b <= batch) for batch in sorted(files)]
    cut = [range(a * PER_FILE, b * PER_FILE) for a, b in zip([0, *ends], ends, strict=False)]
    assert contents(db, merge_table) == expected_merge(old_contents(), cut, PER_FILE)
    print(f"batches that took several files: { ({b: n for b, n in files.items() if n > 1}) }")
    # Every batch Spark committed was decided by the sink, the last one last.
    assert sink_mark(db, f"{sink}-append")[0] == last_committed(checkpoint) == max(files)
    assert sink_mark(db, f"{sink}-merge")[0] == last_committed(checkpoint)
    assert leftovers(db) == ([], [])
