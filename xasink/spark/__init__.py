"""Everything that touches a SparkSession or a DataFrame: write_xa, foreach_batch, the
data source, Spark Connect and the task entry points. The only package that imports pyspark."""
