"""`format("xasink")`'s options, read into the same request `write_xa` builds.

Spark JDBC's option names are used where they exist (`url`, `dbtable`, `user`, `password`,
`batchsize`, `numPartitions`); xasink's own are `xasink.<name>` (`key`, `op` and `order` also
without the prefix). As with Spark JDBC, any other option is passed to the JDBC driver as a
connection property; an unknown `xasink.` option is an error. Keys are case-insensitive.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from .. import defaults
from ..driver.request import JobRequest
from ..driver.sinks import sink_batch
from ..errors import ConfigurationError
from ..protocol.connecting import make_spec
from ..spec import CommitProperties, Database, TableRef, WriterProperties
from ..tables.modes import APPEND, OVERWRITE, ModeOptions

#: Spark JDBC options xasink has no use for (it picks the XADataSource itself; a stream's
#: sink is named by Spark's query id, which survives any spelling of its checkpoint path).
_IGNORED = frozenset({"driver", "path", "checkpointlocation"})
#: Spark JDBC options that cannot mean what they mean there.
_REFUSED = {
    "createtablecolumntypes": "create the table yourself, or let xasink create it from the "
    "DataFrame's schema (xasink.create=if_missing)",
    "truncate": "overwrite replaces the rows in one transaction; the table is never dropped",
    "isolationlevel": "every xasink session runs at READ COMMITTED, which its commit "
    "protocol needs",
    "query": "write into a table (dbtable)",
}
_OWN = (
    "mode",
    "key",
    "op",
    "order",
    "opvalues",
    "create",
    "bulk",
    "driverwritebytes",
    "jars",
    "dialect",
    "xadatasource",
    "journalschema",
    "connecttimeout",
    "lockwaittimeout",
    "grace",
    "recoverfirst",
    "commitretries",
    "commitparallelism",
    "heartbeatinterval",
    "leaseseconds",
    "starttimeout",
    "networktimeout",
    "sinkid",
)
_UNPREFIXED = ("key", "op", "order")


@dataclass(frozen=True)
class FormatRequest:
    """A format("xasink") write: the job request plus what only the writers need."""

    request: JobRequest
    #: The most branches the input may have (numPartitions, or PostgreSQL's default): a
    #: task beyond them fails before it opens a branch, and the server check counts them.
    max_branches: int | None
    #: Seconds between heartbeats sent by the writing tasks.
    heartbeat_interval: float
    #: Streaming: the sink's id when given (else the streaming query's own id names it).
    sink_id: str | None = None
    #: Streaming: the writer's options, hashed: finds the jobs this stream minted when
    #: Spark's abort() brings no task message.
    stream_key: str | None = None
    lease: float = defaults.TASK_LEASE
    start_timeout: float = defaults.START_TIMEOUT


def parse(
    options: Mapping[str, str],
    columns: Sequence[str],
    *,
    overwrite: bool,
    streaming: bool = False,
) -> FormatRequest:
    """Validate the options of one write (each message names the option to fix)."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    own = _own_options(given)
    for name, why in _REFUSED.items():
        if name in given:
            raise ConfigurationError(f"format('xasink') does not take option {name!r}: {why}.")
    url = given.get("url")
    table = given.get("dbtable")
    if not url or not table:
        raise ConfigurationError(
            "format('xasink') needs .option('url', 'jdbc:...') and .option('dbtable', "
            "'table'): the database and the table to write."
        )
    mode = _mode(own.get("mode"), overwrite)
    properties = {
        k: v
        for k, v in given.items()
        if k not in ("url", "dbtable", "user", "password", "batchsize", "numpartitions")
        and k not in _IGNORED
        and not k.startswith("xasink.")
        and k not in _UNPREFIXED
    }
    database = Database(
        url,
        user=given.get("user"),
        password=given.get("password"),
        properties=properties,
        dialect=own.get("dialect"),
        xa_datasource=own.get("xadatasource"),
        jars=_list(own.get("jars")),
        connect_timeout=_whole(own, "connecttimeout", defaults.CONNECT_TIMEOUT),
        network_timeout=_number(own, "networktimeout", defaults.NETWORK_TIMEOUT),
        journal_schema=own.get("journalschema"),
    )
    spec = make_spec(database)
    key = _list(own.get("key"))
    request = JobRequest(
        spec=spec,
        target=TableRef.parse(table),
        options=ModeOptions.build(
            mode, key or None, own.get("op"), own.get("order"), _op_values(own), columns
        ),
        create=cast(defaults.Create, own.get("create", defaults.CREATE)),  # JobRequest checks it
        writer=WriterProperties(
            batch_size=_whole(given, "batchsize", defaults.BATCH_SIZE),
            bulk=_flag(own, "bulk", True),
            driver_write_bytes=_whole(own, "driverwritebytes", defaults.DRIVER_WRITE_BYTES),
        ),
        commit=CommitProperties(
            retries=_whole(own, "commitretries", defaults.COMMIT_RETRIES),
            parallelism=_whole(own, "commitparallelism", defaults.COMMIT_PARALLELISM),
            recover_first=_flag(own, "recoverfirst", True),
            grace=_number(own, "grace", defaults.GRACE),
            lock_wait_timeout=_number(own, "lockwaittimeout", defaults.LOCK_WAIT),
        ),
        journal_schema=database.journal_schema,
    )
    sink_id = own.get("sinkid") or None
    if sink_id is not None:
        sink_batch(sink_id, 0)  # validates it now, not at the first batch
    branches = _whole(given, "numpartitions", 0) or None
    if branches is None and spec.dialect == "postgres":
        branches = defaults.POSTGRES_BRANCHES
    interval = _positive(own, "heartbeatinterval", defaults.HEARTBEAT_INTERVAL)
    return FormatRequest(
        request=request,
        max_branches=branches,
        heartbeat_interval=interval,
        sink_id=sink_id,
        stream_key=_stream_key(given, spec.masked_url) if streaming else None,
        lease=_lease(own, interval),
        start_timeout=_number(own, "starttimeout", defaults.START_TIMEOUT),
    )


def _lease(own: Mapping[str, str], interval: float) -> float:
    """`leaseseconds`, at least a few heartbeat intervals: a live job's tasks beat once an
    interval (a quick one at its start), and recovery takes a job silent past it for dead."""
    lease = _number(own, "leaseseconds", defaults.TASK_LEASE)
    if lease < defaults.LEASE_INTERVALS * interval:
        raise ConfigurationError(
            f"Option 'xasink.leaseSeconds' ({lease:g}) must be at least "
            f"{defaults.LEASE_INTERVALS} heartbeat intervals (xasink.heartbeatInterval = "
            f"{interval:g}): recovery takes a job silent that long for dead, and its tasks "
            "beat once an interval. Raise leaseSeconds or lower heartbeatInterval."
        )
    return lease


def _own_options(given: Mapping[str, str]) -> dict[str, str]:
    own = {k[len("xasink.") :]: v for k, v in given.items() if k.startswith("xasink.")}
    unknown = sorted(set(own) - set(_OWN))
    if unknown:
        raise ConfigurationError(
            f"Unknown option(s) {', '.join('xasink.' + u for u in unknown)}; xasink's options "
            f"are {', '.join('xasink.' + o for o in _OWN)}."
        )
    for name in _UNPREFIXED:
        if name in given:
            if name in own and own[name] != given[name]:
                raise ConfigurationError(f"Options {name!r} and 'xasink.{name}' disagree.")
            own[name] = given[name]
    return own


def _mode(mode: str | None, overwrite: bool) -> str:
    """Spark's save mode (append/overwrite) and xasink.mode (upsert/merge) together."""
    if mode is None:
        return OVERWRITE if overwrite else APPEND
    if overwrite and mode != OVERWRITE:
        raise ConfigurationError(
            f"mode('overwrite') and xasink.mode={mode!r} disagree: use mode('append') with "
            f"xasink.mode={mode!r}, or drop xasink.mode."
        )
    return mode


def _list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _op_values(own: Mapping[str, str]) -> dict[str, str | list[str]] | None:
    text = own.get("opvalues")
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigurationError(
            "xasink.opValues takes a JSON object, e.g. "
            '{"insert": "c", "update": "u", "delete": "d"}.'
        )
    return value


#: A parsed option: a whole number or a float.
N = TypeVar("N", int, float)


def _number(options: Mapping[str, str], name: str, default: float) -> float:
    return _parsed(options, name, default, float)


def _whole(options: Mapping[str, str], name: str, default: int) -> int:
    return _parsed(options, name, default, int)


def _parsed(options: Mapping[str, str], name: str, default: N, kind: Callable[[str], N]) -> N:
    """Option `name` as a finite `kind` of 0 or more, or `default` when it is not given."""
    text = options.get(name)
    if text is None:
        return default
    try:
        value: N | None = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"Option {name!r} takes a number, 0 or more; got {text!r}.")
    return value


def _positive(options: Mapping[str, str], name: str, default: float) -> float:
    value = _number(options, name, default)
    if value <= 0:
        raise ConfigurationError(f"Option {name!r} takes a number above 0; got {options[name]!r}.")
    return value


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ConfigurationError(f"Option 'xasink.{name}' takes true or false; got {text!r}.")
    return text.lower() == "true"


def _stream_key(options: Mapping[str, str], url: str) -> str:
    """The same for every writer Spark makes for one query run (they get the same options),
    from what names the stream and never a secret: the masked URL, the table, the checkpoint
    and the sink and query names."""
    named = [url, *(options.get(k, "") for k in _STREAM_NAMES)]
    return hashlib.sha256(json.dumps(named).encode()).hexdigest()[:32]


#: The options that tell one stream's writer from another's (with the URL, passwords masked).
_STREAM_NAMES = ("dbtable", "checkpointlocation", "queryname", "xasink.sinkid", "xasink.mode")


__all__ = ["FormatRequest", "parse"]
