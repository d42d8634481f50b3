"""One job on the driver, from preflight to finish (the `Job`); no pyspark."""
