"""The protocol between the worker, the supervisor and its child (worker/harness/protocol.py):
every field the supervisor writes is marked observed or reported, and reading a reported one
says so."""

import typing

import pytest

from worker.harness import protocol
from worker.harness.observer import Observer
from worker.harness.protocol import OBSERVED_FIELDS, PROVENANCE, Source, Word


def test_the_words_are_one_byte_each_and_distinct():
    words = [w.value for w in Word]
    assert all(len(w) == 1 for w in words) and len(set(words)) == len(words)
    assert Word.DONE == b"D" and Word.ANSWER == b"k"  # bytes on the wire, compared as bytes


def test_every_field_the_supervisor_writes_is_marked():
    """What ``Observer.result`` writes and what ``runtime.Api.supervise`` adds (mode, items): each
    has a source, and the typed record names the same members."""
    written = set(Observer(None).result(None)) | {"mode", "items"}
    assert written == set(OBSERVED_FIELDS) == set(typing.get_type_hints(protocol.Observed))
    assert set(PROVENANCE) == set(typing.get_type_hints(protocol.Trace))


def test_the_in_child_meters_are_reported_and_the_kernels_memory_observed():
    assert protocol.source("data.observed.meters") is Source.REPORTED  # the child sends them
    assert protocol.source("data.observed.memory") is Source.OBSERVED
    assert protocol.source("data.observed.snapshots") is Source.OBSERVED
    assert protocol.source("data.loss") is Source.REPORTED  # the kind's own data
    assert protocol.source("data.observed.unheard_of") is Source.REPORTED  # unknown: not believed
    assert protocol.source("timings") is Source.OBSERVED and protocol.source("output") is Source.REPORTED


def test_a_reported_field_is_read_by_name_and_never_the_observations():
    data = {"peak_saved_bytes": 0, "observed": {"meters": [{"peak": 7}]}}
    assert protocol.reported(data, "peak_saved_bytes") == 0
    assert protocol.reported(data, "missing", 3) == 3 and protocol.reported(None, "x") is None
    with pytest.raises(KeyError):
        protocol.reported(data, "observed")
    assert protocol.reported_meters(data["observed"]) == [{"peak": 7}]
    assert protocol.reported_meters({"meters": "forged"}) == []
