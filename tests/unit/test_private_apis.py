"""xasink leans on four private APIs, each for a reason written where it is used. These
tests pin them, so that an upgrade of Python, pyspark or JPype that removes one fails here,
by name, instead of as a silent change of behaviour."""

from __future__ import annotations

import inspect
import threading

import jpype
import jpype.config


def test_threading_runs_exit_hooks_before_it_joins_threads() -> None:
    # runtime/shutdown.py: xasink's exit waits for writes before concurrent.futures and
    # daemon threads go away (atexit runs too late for that).
    assert callable(threading._register_atexit)  # type: ignore[attr-defined]
    assert "_threading_atexits" in vars(threading)


def test_classic_dataframes_collect_as_arrow_batches() -> None:
    # spark/tasks.py write_from_driver: a small frame's Arrow batches, without toArrow()'s
    # cast to one table.
    from pyspark.sql.classic.dataframe import DataFrame

    assert callable(DataFrame._collect_as_arrow)
    assert "self" in inspect.signature(DataFrame._collect_as_arrow).parameters


def test_classic_dataframes_expose_their_java_plan() -> None:
    # spark/session.py estimated_bytes: the optimizer's size estimate decides whether the
    # driver writes a frame itself; partition_count: the plan's RDD's partition count.
    from pyspark.sql.classic.dataframe import DataFrame

    assert "_jdf" in inspect.getsource(DataFrame.__init__)


def test_jpype_has_the_reference_queue_xasink_stops_at_exit() -> None:
    # runtime/shutdown.py stop_java_callbacks: the Java thread that calls into Python must
    # stop before the interpreter finalizes. The class ships inside JPype's own jar.
    assert hasattr(jpype.config, "onexit")
    assert "org.jpype.ref.JPypeReferenceQueue" in _jpype_jar_entries()


def _jpype_jar_entries() -> str:
    import zipfile
    from pathlib import Path

    jars = list(Path(jpype.__file__).parent.parent.glob("org.jpype.jar"))
    assert jars, "JPype's support jar is missing"
    with zipfile.ZipFile(jars[0]) as jar:
        return " ".join(n.replace("/", ".").removesuffix(".class") for n in jar.namelist())
