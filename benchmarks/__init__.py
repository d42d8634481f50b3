"""Benchmark harness: Spark's JDBC writer vs `xasink.write_xa` vs a raw bulk load.

Run it with ``python -m benchmarks`` (see ``benchmarks/README.md``).
"""
