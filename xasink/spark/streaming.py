"""Structured Streaming: exactly once per micro-batch, through `foreachBatch`.

Spark runs a micro-batch again after a crash, with the same batch id and (for a replayable
source) the same rows. Each batch is one write_xa job whose commit decision also records the
batch in the sink's row of the journal, so a replayed batch is recognised and skipped, and two
queries sharing a sink cannot both commit one batch (see :mod:`xasink.driver.sinks`).
Each batch's job-end line (`xasink.jobs`) names its sink and batch id and its lag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..driver.sinks import sink_batch
from ..errors import ConfigurationError
from .write import write_xa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def foreach_batch(
    url: str, table: str, *, sink_id: str, **write_options: Any
) -> Callable[[DataFrame, int], None]:
    """A function for `df.writeStream.foreachBatch(...)` that writes each micro-batch into
    `table` exactly once.

    Args:
        url: the JDBC URL, as for `write_xa`.
        table: the target table, as for `write_xa`.
        sink_id: the stream's place in the journal (printable ASCII): keep it for every run
            of the query, as long as its checkpoint, and give every query its own. A batch
            at or below the sink's mark from another query, or below it from this one, is
            refused with SinkConflictError; `xasink reset-sink` starts the sink anew.
        **write_options: any keyword of `write_xa` (`mode`, `key`, `op`, `user`, ...)
            except `sink_id` and `batch_id`.
    """
    sink_batch(sink_id, 0)  # validates sink_id now, not at the first batch
    taken = {"sink_id", "batch_id"} & set(write_options)
    if taken:
        raise ConfigurationError(
            f"foreach_batch sets {', '.join(sorted(taken))} itself; pass sink_id=... only."
        )

    def write_batch(df: DataFrame, batch_id: int) -> None:
        # The batch's end (committed or skipped) is logged by its job (xasink.jobs).
        write_xa(df, url, table, sink_id=sink_id, batch_id=int(batch_id), **write_options)

    return write_batch


__all__ = ["foreach_batch"]
