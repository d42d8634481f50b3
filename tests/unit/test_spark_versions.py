"""What differs between PySpark releases (xasink/spark/versions.py), told without a session."""

from __future__ import annotations

import pytest

from xasink.spark import versions


@pytest.mark.parametrize(
    ("text", "release"),
    [("3.5.9", (3, 5)), ("4.0.5", (4, 0)), ("4.1.0.dev1", (4, 1)), ("4.3.0rc2", (4, 3))],
)
def test_release(text, release):
    assert versions.release(text) == release


def test_the_data_source_classes_are_spark_4s_or_refused_in_xasink_words():
    if versions.PYSPARK < (4, 0):
        with pytest.raises(ImportError, match=r"needs PySpark 4\.0 or newer"):
            from xasink.spark.versions import DataSourceStreamArrowWriter
        return
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

    from xasink.spark.versions import DataSourceStreamArrowWriter

    # 4.0's tasks give a stream writer Arrow batches only when it is an Arrow writer too.
    assert issubclass(DataSourceStreamArrowWriter, DataSourceStreamWriter)
    if versions.PYSPARK == (4, 0):
        assert issubclass(DataSourceStreamArrowWriter, DataSourceArrowWriter)
