"""The table being written: its columns, its creation and checks, Spark type decisions, the
write modes and the staged apply."""
