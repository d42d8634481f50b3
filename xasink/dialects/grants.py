"""The groups of `Dialect.writer_grants`: the GRANTs a writer login needs on a journal
that an administrator made (`xasink init`), by the writes that need them."""

from __future__ import annotations

#: What every write needs: DML on the journal's tables (and what finds XA branches).
EVERY_WRITE = "every write"
#: What upsert, overwrite and merge add: their staging tables.
STAGED_WRITES = "upsert, overwrite and merge (their staging tables)"
