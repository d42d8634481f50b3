"""The option names format("xasink") knows: xasink's own, the Spark JDBC options it takes,
and the Spark JDBC options it refuses, each with the reason and what to use instead. Any
other name must be a connection property the JDBC driver declares (see options)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: xasink's own options (`xasink.<name>`), as the docs spell them; matched case-insensitively.
OWN = (
    "mode",
    "key",
    "op",
    "order",
    "opValues",
    "create",
    "schemaMode",
    "bulk",
    "driverWriteBytes",
    "jars",
    "dialect",
    "xaDataSource",
    "journalSchema",
    "connectTimeout",
    "lockWaitTimeout",
    "grace",
    "recoverFirst",
    "commitRetries",
    "commitParallelism",
    "heartbeatInterval",
    "leaseSeconds",
    "startTimeout",
    "networkTimeout",
    "sinkId",
    "replaceWhere",
    "preSql",
    "postSql",
)
#: xasink's options that may also go without the prefix (both spellings must agree).
UNPREFIXED = ("mode", "key", "op", "order")
#: Spark JDBC's options that xasink takes, as Spark spells them.
SPARK = (
    "url",
    "dbtable",
    "user",
    "password",
    "batchsize",
    "numPartitions",
    "sessionInitStatement",
    "createTableOptions",
    "createTableColumnTypes",
)
#: Accepted and not needed: xasink picks the XADataSource itself, `.save(path)` passes a
#: path, and a stream's sink is named by Spark's query id, which survives any spelling of
#: its checkpoint path (the checkpoint and query name only tell one stream's jobs apart).
IGNORED = ("driver", "path", "checkpointLocation", "queryName")

_READS = "it tunes reads, and format('xasink') only writes (read with format('jdbc'))"
_KERBEROS = (
    "xasink has no Kerberos login of its own; give the JDBC driver's own properties for it "
    "(they pass through)"
)
#: Spark JDBC's options that cannot mean here what they mean there.
REFUSED = {
    "query": "write into a table (dbtable)",
    "truncate": "overwrite replaces the rows in one transaction; the table is never dropped",
    "cascadeTruncate": "xasink never truncates: overwrite deletes the old rows in its one "
    "transaction, and the foreign keys' own ON DELETE rules apply",
    "isolationLevel": "every xasink session runs at READ COMMITTED, which its commit "
    "protocol needs",
    "queryTimeout": "xasink bounds every JDBC call by xasink.networkTimeout and every lock "
    "wait by xasink.lockWaitTimeout; a per-statement timeout would fail a long load or "
    "apply midway",
    "tableComment": "xasink does not comment the tables it creates: run COMMENT ON TABLE "
    "yourself, or on MySQL and MariaDB give createTableOptions \"COMMENT='...'\"",
    "connectionProvider": "xasink connects through the driver's XADataSource "
    "(xasink.xaDataSource names another)",
    "keytab": _KERBEROS,
    "principal": _KERBEROS,
    "refreshKrb5Config": _KERBEROS,
    **dict.fromkeys(
        (
            "partitionColumn",
            "lowerBound",
            "upperBound",
            "fetchsize",
            "customSchema",
            "pushDownPredicate",
            "pushDownAggregate",
            "pushDownLimit",
            "pushDownOffset",
            "pushDownTableSample",
            "pushDownJoin",
            "prepareQuery",
            "preferTimestampNTZ",
            "hint",
        ),
        _READS,
    ),
}


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to `name` (compared case-insensitively), in its spelling."""
    spelled = {k.lower(): k for k in known}
    found = difflib.get_close_matches(name.lower(), list(spelled), n=1, cutoff=0.6)
    return spelled[found[0]] if found else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """': did you mean 'x'?' for the name nearest `name`, or '' when none is near."""
    found = nearest(name, known)
    return f": did you mean {found!r}?" if found else ""


#: Every name format("xasink") itself knows, as spelled in the docs.
KNOWN = (*(f"xasink.{o}" for o in OWN), *UNPREFIXED, *SPARK, *IGNORED, *REFUSED)
