"""JVM and JDBC plumbing: the in-process JVM, driver jars, xasink's Java helpers, JDBC
helpers, an orderly exit and step timing."""
