"""XIDs: generic XA ids, pgjdbc's gid form, and the layout that marks a branch as xasink's."""

from __future__ import annotations

import base64

import pytest

from xasink.xid import FORMAT_ID, MAX_PART_BYTES, BranchId, Xid, valid_job_id

JOB = "0123456789abcdef0123456789abcdef"
GTRID = b"xasink1:a1b2c3d4:" + JOB.encode()


def test_format_id_is_xasx_a_positive_31_bit_integer():
    assert FORMAT_ID == int.from_bytes(b"xasx", "big") == 2019652472
    assert 0 < FORMAT_ID < 2**31


def test_branch_xid_layout():
    xid = BranchId("a1b2c3d4", JOB, 7, 42).xid
    assert xid == Xid(FORMAT_ID, GTRID, b"p7:a42")
    assert BranchId("a1b2c3d4", JOB, 7, 42).name == f"{JOB}/p7/a42"


def test_branch_xid_round_trips_at_the_extremes_and_fits_xa_limits():
    branch = BranchId("a1b2c3d4", JOB, 2**31 - 1, 2**63 - 1)
    xid = branch.xid
    assert xid.bqual == b"p2147483647:a9223372036854775807"
    assert (len(xid.gtrid), len(xid.bqual)) == (49, 32)
    assert BranchId.parse(xid) == branch
    assert BranchId.parse(Xid.from_string(str(xid))) == branch


def test_attempts_of_one_partition_never_collide():
    xids = {BranchId("a1b2c3d4", JOB, 7, attempt).xid for attempt in range(100)}
    assert len(xids) == 100


@pytest.mark.parametrize(
    ("xid", "why"),
    [
        (Xid(1, GTRID, b"p0:a0"), "another formatId"),
        (Xid(FORMAT_ID, b"something-else", b"p0:a0"), "our formatId, foreign layout"),
        (Xid(FORMAT_ID, GTRID, b"p00:a0"), "non-canonical partition"),
        (Xid(FORMAT_ID, GTRID, b"p0:a01"), "non-canonical attempt"),
        (Xid(FORMAT_ID, GTRID, b"p-1:a0"), "negative partition"),
        (Xid(FORMAT_ID, GTRID + b"x", b"p0:a0"), "trailing byte"),
        (Xid(FORMAT_ID, GTRID.replace(b"a1b2c3d4", b"A1B2C3D4"), b"p0:a0"), "upper-case tag"),
        (Xid(FORMAT_ID, GTRID.replace(b"xasink1", b"xasink2"), b"p0:a0"), "other version"),
        (Xid(FORMAT_ID, GTRID, b"p12345678901:a0"), "partition of 11 digits"),
    ],
)
def test_foreign_xids_are_not_ours(xid, why):
    assert BranchId.parse(xid) is None, why


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((-1, b"g", b"b"), ValueError, "formatId must be in 0..2**31-1, got -1"),
        ((2**31, b"g", b"b"), ValueError, "formatId must be in 0..2**31-1, got 2147483648"),
        ((1, b"g" * 65, b"b"), ValueError, "gtrid is 65 bytes; XA allows 64"),
        ((1, b"g", b"b" * 65), ValueError, "bqual is 65 bytes; XA allows 64"),
        ((1, "g", b"b"), TypeError, "gtrid must be bytes, got str"),
    ],
)
def test_xid_ranges_are_checked(args, error, message):
    with pytest.raises(error) as caught:
        Xid(*args)
    assert str(caught.value) == message


def test_xid_parts_may_be_exactly_64_bytes():
    xid = Xid(0, b"g" * MAX_PART_BYTES, b"b" * MAX_PART_BYTES)
    assert Xid.from_string(str(xid)) == xid


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"journal": "zz"}, "journal tag must be 8 hex digits, got 'zz'"),
        ({"journal": "A1B2C3D4"}, "journal tag must be 8 hex digits, got 'A1B2C3D4'"),
        ({"job_id": JOB[:-1]}, f"job id must be 32 hex digits, got {JOB[:-1]!r}"),
        ({"partition": -1}, "partition out of range: -1"),
        ({"partition": 2**31}, "partition out of range: 2147483648"),
        ({"attempt": 2**63}, "attempt out of range: 9223372036854775808"),
    ],
)
def test_branch_id_ranges_are_checked(kwargs, message):
    fields = {"journal": "a1b2c3d4", "job_id": JOB, "partition": 0, "attempt": 0, **kwargs}
    with pytest.raises(ValueError) as caught:
        BranchId(**fields)
    assert str(caught.value) == message


def test_pgjdbc_gid_format():
    xid = Xid.from_parts(42, "gtrid", "bq")
    gid = f"42_{base64.b64encode(b'gtrid').decode()}_{base64.b64encode(b'bq').decode()}"
    assert gid == "42_Z3RyaWQ=_YnE="
    assert str(xid) == gid
    assert Xid.from_string(gid) == xid == Xid(42, b"gtrid", b"bq")


@pytest.mark.parametrize(
    "gid", ["foreign-app-1", "1_!!_xx", "x_YQ==_YQ==", "1_YQ==", "-1_YQ==_YQ=="]
)
def test_foreign_gids_do_not_parse(gid):
    with pytest.raises(ValueError, match="not a pgjdbc gid"):
        Xid.from_string(gid)


@pytest.mark.parametrize(
    ("job_id", "valid"),
    [
        (JOB, True),
        ("f" * 32, True),
        (JOB.upper(), False),
        (JOB[:-1], False),
        (JOB + "0", False),
        (JOB[:-1] + "g", False),
        (None, False),
        (int(JOB, 16), False),
    ],
)
def test_valid_job_id(job_id, valid):
    assert valid_job_id(job_id) is valid


# -- XIDs that only look like ours --------------------------------------------------------
@pytest.mark.parametrize(
    "xid",
    [Xid(FORMAT_ID, GTRID, b"p0:a0\n"), Xid(FORMAT_ID, GTRID + b"\n", b"p0:a0")],
    ids=["bqual", "gtrid"],
)
def test_a_trailing_newline_makes_an_xid_foreign(xid):
    assert BranchId.parse(xid) is None


def test_a_job_id_with_a_trailing_newline_is_not_valid():
    assert valid_job_id(JOB + "\n") is False


@pytest.mark.parametrize("bqual", [b"p9999999999:a0", b"p0:a9999999999999999999"])
def test_an_xid_with_numbers_beyond_range_is_foreign_not_an_error(bqual):
    assert BranchId.parse(Xid(FORMAT_ID, GTRID, bqual)) is None
