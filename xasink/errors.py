"""One hierarchy for every failure xasink reports.

Each message says what happened and what to do next; none carries a secret (callers pass
text through :mod:`xasink.masking` first).
"""

from __future__ import annotations


class XasinkError(Exception):
    """Base class: catch this to handle any xasink failure."""

    #: The job the failure belongs to, once one exists (set by the job that raised it).
    job_id: str | None = None


class ConfigurationError(XasinkError):
    """The call itself is wrong: bad argument, unknown URL scheme, unusable option."""


class DriverNotFoundError(ConfigurationError):
    """No JDBC driver jar could be found for the database."""


class PreflightError(XasinkError):
    """A prerequisite is missing; nothing was written and no branch was opened."""


class WriteError(XasinkError):
    """A partition writer failed; its branch was rolled back."""


class RowsRefusedError(WriteError):
    """The server stored fewer rows than were sent, or changed some (MySQL's LOAD DATA
    LOCAL warns where an INSERT fails): it refused the rows themselves."""


class CommitError(XasinkError):
    """Phase 2 could not complete. Run `xasink recover` to finish what is decided."""


class LostBranchError(CommitError):
    """A winning branch vanished without its marker: its rows were not committed."""

    def __init__(self, message: str, branches: list[str]) -> None:
        super().__init__(message)
        self.branches = branches


class JobAbortedError(CommitError):
    """The job was aborted before its commit decision (by a recovery run, or because the
    decision could not be recorded): nothing was committed."""


class DecisionUnknownError(CommitError):
    """The commit decision may or may not be durable; `xasink recover` settles it."""


class SinkConflictError(JobAbortedError):
    """Another job decided the same batch of a streaming sink first: two queries share one
    sink_id. This job committed nothing."""


class JournalError(XasinkError):
    """The journal holds something xasink did not write, or cannot be used as it is."""


class XaError(XasinkError):
    """A classified XA failure (see :class:`xasink.protocol.xa.XaFailure`)."""


class SchemaMismatchError(PreflightError):
    """The DataFrame does not fit the table (a column, a type, a NOT NULL); nothing written."""


class UnsupportedTypeError(SchemaMismatchError):
    """A Spark type has no column type in this database; nothing was written."""


class InputDataError(XasinkError):
    """The rows themselves cannot be applied (duplicate keys, unknown op); nothing was written."""
