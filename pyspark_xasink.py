"""Lets Spark find `format("xasink")` with no registration call: Spark imports every
top-level module named `pyspark_*` that defines `DefaultSource` when a session first
looks up a Python data source."""

from xasink.spark.datasource import XasinkDataSource as DefaultSource

__all__ = ["DefaultSource"]
