"""One partition, one prepared XA branch: what runs in a Spark task (or in the driver for a
small frame); no pyspark."""
