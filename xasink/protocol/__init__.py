"""The XA commit protocol: the XA facade, branch operations, the journal and its sink marks,
recovery, operator commands, heartbeats and sessions. Imports nothing from Spark, the write
modes or the driver."""
