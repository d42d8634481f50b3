"""The keywords of a write that its mode would not use are refused, naming the mode that
uses them, before anything runs (a stream's before its first batch)."""

from __future__ import annotations

import pytest

from xasink import foreach_batch
from xasink.errors import ConfigurationError
from xasink.tables.modes import ModeOptions

URL = "jdbc:postgresql://db:5432/app"


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ({"order": "ts"}, "upsert"),
        ({"mode": "overwrite", "order": "ts"}, "upsert"),
        ({"op": "op"}, "merge"),
        ({"mode": "upsert", "key": "id", "op": "op"}, "merge"),
        ({"op_values": {"delete": "d"}}, "merge"),
    ],
)
def test_a_keyword_the_mode_does_not_use_names_the_mode_that_does(given, meant):
    with pytest.raises(ConfigurationError, match=rf"did you mean mode='{meant}'\?$"):
        foreach_batch(URL, "events", sink_id="s", **given)
    mode = given.get("mode", "append")
    with pytest.raises(ConfigurationError, match=rf"did you mean mode='{meant}'\?$"):
        ModeOptions.build(
            mode,
            given.get("key"),
            given.get("op"),
            given.get("order"),
            given.get("op_values"),
            ["id", "op", "ts"],
        )


def test_a_stream_missing_what_its_mode_needs_is_refused_before_it_starts():
    with pytest.raises(ConfigurationError, match=r"mode='merge' needs key"):
        foreach_batch(URL, "events", sink_id="s", mode="merge")
