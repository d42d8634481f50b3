"""Structured Streaming: exactly once per micro-batch, through `foreachBatch`.

Spark runs a micro-batch again after a crash, with the same batch id and (for a replayable
source) the same rows. Each batch is one write_xa job whose commit decision also records the
batch in the sink's row of the journal, so a replayed batch is recognised and skipped, and two
queries sharing a sink cannot both commit one batch (see :mod:`xasink.driver.sinks`).
Each batch's job-end line (`xasink.jobs`) names its sink and batch id and its lag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .. import defaults
from ..driver.sinks import sink_batch
from ..errors import ConfigurationError
from ..spec import CommitProperties, Database, WriteOptions, write_options
from ..tables.evolution import check_schema_mode
from ..tables.modes import check_mode
from .arguments import check_database, check_properties, check_table
from .write import write_xa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from typing_extensions import Unpack


def foreach_batch(
    database: Database | str,
    table: str | Sequence[str],
    *,
    sink_id: str,
    commit_properties: CommitProperties | None = None,
    **options: Unpack[WriteOptions],
) -> Callable[[DataFrame, int], None]:
    """A function for `df.writeStream.foreachBatch(...)` that writes each micro-batch into
    `table` exactly once.

    Args:
        database: where to write (`xasink.Database`, or a JDBC URL string).
        table: the target table, as for `write_xa`.
        sink_id: the stream's place in the journal (printable ASCII): keep it for every run
            of the query, as long as its checkpoint, and give every query its own. A batch
            at or below the sink's mark from another query, or below it from this one, is
            refused with SinkConflictError; `xasink reset-sink` starts the sink anew.
        commit_properties: as for `write_xa`.
        **options: how each batch changes the table (`WriteOptions`: `mode`, `key`, ...).
    """
    sink_batch(sink_id, 0)  # validates sink_id now, not at the first batch
    if "batch_id" in options:
        raise ConfigurationError("foreach_batch sets batch_id itself; pass sink_id=... only.")
    given = write_options("foreach_batch", options)
    check_database("foreach_batch(database, table)", database, table)
    check_table("foreach_batch(database, table)", table)
    check_properties("foreach_batch", commit_properties=commit_properties, **given)
    # Before the stream starts: a keyword its mode does not use, a mode missing one.
    check_mode(
        given.get("mode", defaults.MODE),
        given.get("key"),
        given.get("op"),
        given.get("order"),
        given.get("op_values"),
    )
    check_schema_mode(given.get("schema_mode"))
    db = Database.of(database)

    def write_batch(df: DataFrame, batch_id: int) -> None:
        # The batch's end (committed or skipped) is logged by its job (xasink.jobs).
        commit, batch = commit_properties, int(batch_id)
        write_xa(df, db, table, commit_properties=commit, sink_id=sink_id, batch_id=batch, **given)

    return write_batch


__all__ = ["foreach_batch"]
