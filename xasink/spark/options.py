"""`format("xasink")`'s options, read into the same request `write_xa` builds.

Spark JDBC's option names are used where they exist (`url`, `dbtable`, `user`, `password`,
`batchsize`, `numPartitions`, `sessionInitStatement`, `createTableOptions`,
`createTableColumnTypes`); xasink's own are `xasink.<name>` (`mode`, `key`, `op` and `order`
also without the prefix). Spark JDBC's options that mean nothing here are refused with the
reason (option_names). Any other option is a JDBC connection property, as with Spark JDBC,
if the JDBC driver declares one of that name: it is passed on in the driver's spelling
(Spark hands a Python data source its option names lower-cased, and drivers read them
case-sensitively); a name nobody knows (a misspelt option) is refused, naming the nearest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar, cast

from .. import defaults
from ..dialects import get_dialect
from ..dialects.driver_properties import TLS_LIKE, known, nearest_property, offered
from ..driver.request import JobRequest
from ..driver.sinks import sink_batch
from ..errors import ConfigurationError
from ..protocol.connecting import make_spec
from ..protocol.sessions import declared_properties
from ..spec import (
    CommitProperties,
    ConnectionSpec,
    Database,
    TableRef,
    WriterProperties,
    properties_tuple,
)
from ..tables.evolution import check_schema_mode
from ..tables.modes import APPEND, OVERWRITE, ModeOptions
from ..tables.new_table import OPTIONS as CREATE_OPTIONS
from ..tables.new_table import NewTable
from .option_names import (
    IGNORED,
    KNOWN,
    OWN,
    REFUSED,
    SPARK,
    UNPREFIXED,
    nearest,
)

log = logging.getLogger("xasink")

_OWN = {o.lower(): o for o in OWN}
#: The names format("xasink") takes itself (lower-cased), beside its `xasink.` options.
_TAKEN = frozenset(n.lower() for n in (*UNPREFIXED, *SPARK, *IGNORED))
_REFUSED = {name.lower(): (name, why) for name, why in REFUSED.items()}

#: What a JDBC driver declares for a spec: its connection properties' names.
DriverProperties = Callable[[ConnectionSpec], Sequence[str]]


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
    driver_properties: DriverProperties = declared_properties,
) -> FormatRequest:
    """Validate the options of one write (each message names the option to fix).
    `driver_properties` asks the JDBC driver for its property names (started only when an
    option is left for it)."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    for name, (spelled, why) in _REFUSED.items():
        if name in given:
            raise ConfigurationError(f"format('xasink') does not take option {spelled!r}: {why}.")
    own = _own_options(given)
    url = given.get("url")
    table = given.get("dbtable")
    if not url or not table:
        raise ConfigurationError(
            "format('xasink') needs .option('url', 'jdbc:...') and .option('dbtable', "
            "'table'): the database and the table to write."
        )
    spelled = "xasink.mode" if "xasink.mode" in given else "mode"
    mode = _mode(own.get("mode"), overwrite, spelled)
    database = _database(url, given, own)
    spec = _with_properties(make_spec(database), given, driver_properties)
    key = _list(own.get("key"))
    mode_options = ModeOptions.build(
        mode,
        key or None,
        own.get("op"),
        own.get("order"),
        _op_values(own),
        columns,
        own.get("replacewhere"),
        _statements(own, "presql"),
        _statements(own, "postsql"),
    )
    create = cast(defaults.Create, own.get("create", defaults.CREATE))  # JobRequest checks it
    schema_mode = check_schema_mode(own.get("schemamode"), "Option 'xasink.schemaMode'")
    request = JobRequest(
        spec=spec,
        target=TableRef.parse(table),
        options=mode_options,
        create=create,
        writer=_writer(given, own),
        commit=_commit(own),
        journal_schema=database.journal_schema,
        new_table=NewTable.build(
            given.get("createtableoptions"),
            given.get("createtablecolumntypes"),
            mode_options.written(columns),
            create,
            CREATE_OPTIONS,
            evolving=schema_mode is not None,
        ),
        schema_mode=schema_mode,
    )
    sink_id = own.get("sinkid") or None
    if sink_id is not None:
        sink_batch(sink_id, 0)  # validates it now, not at the first batch
    branches = _whole(given, "numpartitions", 0) or None
    if branches is None and spec.dialect == "postgres":
        branches = defaults.POSTGRES_BRANCHES
    interval = _positive(own, "heartbeatinterval", defaults.HEARTBEAT_INTERVAL)
    keyed = {**given, "xasink.mode": own.get("mode", "")}  # either spelling names the stream
    return FormatRequest(
        request=request,
        max_branches=branches,
        heartbeat_interval=interval,
        sink_id=sink_id,
        stream_key=_stream_key(keyed, spec.masked_url) if streaming else None,
        lease=_lease(own, interval),
        start_timeout=_number(own, "starttimeout", defaults.START_TIMEOUT),
    )


def _writer(given: Mapping[str, str], own: Mapping[str, str]) -> WriterProperties:
    return WriterProperties(
        batch_size=_whole(given, "batchsize", defaults.BATCH_SIZE),
        bulk=_flag(own, "bulk", True),
        driver_write_bytes=_whole(own, "driverwritebytes", defaults.DRIVER_WRITE_BYTES),
    )


def _commit(own: Mapping[str, str]) -> CommitProperties:
    return CommitProperties(
        retries=_whole(own, "commitretries", defaults.COMMIT_RETRIES),
        parallelism=_whole(own, "commitparallelism", defaults.COMMIT_PARALLELISM),
        recover_first=_flag(own, "recoverfirst", True),
        grace=_number(own, "grace", defaults.GRACE),
        lock_wait_timeout=_number(own, "lockwaittimeout", defaults.LOCK_WAIT),
    )


def _database(url: str, given: Mapping[str, str], own: Mapping[str, str]) -> Database:
    """The database the options name, without connection properties (`_with_properties`)."""
    return Database(
        url,
        user=given.get("user"),
        password=given.get("password"),
        dialect=own.get("dialect"),
        xa_datasource=own.get("xadatasource"),
        jars=_list(own.get("jars")),
        connect_timeout=_whole(own, "connecttimeout", defaults.CONNECT_TIMEOUT),
        network_timeout=_number(own, "networktimeout", defaults.NETWORK_TIMEOUT),
        journal_schema=own.get("journalschema"),
        session_init=given.get("sessioninitstatement"),
    )


def _with_properties(
    spec: ConnectionSpec, given: Mapping[str, str], declared: DriverProperties
) -> ConnectionSpec:
    """`spec` with the options format("xasink") does not take itself, as connection
    properties in the JDBC driver's spelling; one the driver does not declare either is
    refused (a driver that declares none gets them as given, with a warning)."""
    left = {k: v for k, v in given.items() if k not in _TAKEN and not k.startswith("xasink.")}
    if not left:
        return spec
    names = known(get_dialect(spec.dialect), declared(spec))
    if not names:
        log.warning(
            "xasink: the JDBC driver declares no connection properties, so option(s) %s "
            "are passed to it unchecked",
            ", ".join(sorted(left)),
        )
        return replace(spec, properties=properties_tuple(left))
    spelling = {n.lower(): n for n in reversed(names)}  # a declared spelling before an alias
    for name in left:
        if name not in spelling:
            if TLS_LIKE.search(name):  # a driver's setting: never xasink's `mode` for `sslmode`
                near = nearest_property(name, names)
            else:
                near = nearest(name, [*KNOWN, *offered(names)])
            hint = f": did you mean {near!r}?" if near else ""
            raise ConfigurationError(
                f"format('xasink') has no option {name!r}, and the JDBC driver declares no "
                f"connection property of that name{hint or '.'} Nothing was written."
            )
    return replace(spec, properties=tuple((spelling[k], v) for k, v in left.items()))


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
        prefixed = [f"xasink.{o}" for o in OWN]
        near = nearest(f"xasink.{unknown[0]}", prefixed)
        raise ConfigurationError(
            f"Unknown option(s) {', '.join('xasink.' + u for u in unknown)}; xasink's options "
            f"are {', '.join(prefixed)}.{f' Did you mean {near!r}?' if near else ''}"
        )
    for name in UNPREFIXED:
        if name in given:
            if name in own and own[name] != given[name]:
                raise ConfigurationError(f"Options {name!r} and 'xasink.{name}' disagree.")
            own[name] = given[name]
    return own


def _mode(mode: str | None, overwrite: bool, spelled: str) -> str:
    """Spark's save mode (append/overwrite) and the mode option (`spelled`: `mode` or
    `xasink.mode`) together: upsert and merge go with .mode("append"); a mode option of
    append or overwrite must be the save mode's."""
    if mode is None:
        return OVERWRITE if overwrite else APPEND
    if overwrite and mode != OVERWRITE:
        raise ConfigurationError(
            f"mode('overwrite') and {spelled}={mode!r} disagree: use mode('append') with "
            f"{spelled}={mode!r}, or drop {spelled}."
        )
    if not overwrite and mode == OVERWRITE:
        raise ConfigurationError(
            f"mode('append') and {spelled}='overwrite' disagree: use mode('overwrite') "
            f"instead of {spelled}."
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


def _statements(own: Mapping[str, str], name: str) -> str | list[str] | None:
    """xasink.preSql / xasink.postSql: one statement, or a JSON list of them."""
    text = own.get(name)
    if text is None or not text.lstrip().startswith("["):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        spelled = {"presql": "xasink.preSql", "postsql": "xasink.postSql"}[name]
        raise ConfigurationError(
            f"{spelled} takes a SQL statement, or a JSON list of them, e.g. "
            '["UPDATE audit SET n = n + 1", "DELETE FROM cache"].'
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
