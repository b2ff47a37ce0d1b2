"""The stored (sparse) form of a results document's series, and its one reader."""

from __future__ import annotations

import json
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openmrc.paper.experiments import total_series
from openmrc.pipeline.report import _aggregate
from openmrc.pipeline.results import write
from openmrc.pipeline.run import planes_carrying
from openmrc.sim.result import (
    SERIES_KEYS,
    read_series,
    series_span,
    series_values,
    store_series,
)

#: a sample: zero more often than not (the runs of zeros are what the form leaves out)
samples = st.one_of(
    st.just(0.0),
    st.just(0.0),
    st.just(-0.0),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
#: a series: runs of zeros and of samples, in any order
series_st = st.lists(st.tuples(st.integers(0, 40), st.lists(samples, max_size=6)), max_size=6).map(
    lambda runs: [v for zeros, vals in runs for v in [0.0] * zeros + vals]
)


def bits(values: list[float]) -> bytes:
    """The samples bit for bit (so that 0.0 and -0.0 differ)."""
    return array("d", values).tobytes()


@settings(max_examples=300, deadline=None)
@given(series_st)
def test_the_stored_form_round_trips_through_json_bit_for_bit(values: list[float]) -> None:
    stored = json.loads(json.dumps(store_series(values)))
    back = series_values(stored)
    assert bits(back) == bits(values) and all(type(v) is float for v in back)
    start, kept, length = series_span(stored)
    assert length == len(values)
    # it keeps only the samples from the first to the last that is not +0.0
    nonzero = [i for i, v in enumerate(values) if bits([v]) != bits([0.0])]
    assert len(kept) == (nonzero[-1] - nonzero[0] + 1 if nonzero else 0)
    assert start == (nonzero[0] if nonzero else 0)


def test_the_stored_form_is_the_span_between_the_zero_runs() -> None:
    assert store_series([0.0, 0.0, 1.5, 0.0, 2.0, 0.0]) == {
        "length": 6,
        "start": 2,
        "values": [1.5, 0.0, 2.0],
    }
    assert store_series([0.0] * 3) == {"length": 3, "start": 0, "values": []}
    assert store_series([]) == {"length": 0, "start": 0, "values": []}


@pytest.mark.parametrize(
    "bad",
    [
        {"start": 0, "values": []},
        {"length": 2, "start": 1, "values": [1.0, 2.0]},
        {"length": 2, "start": -1, "values": []},
        "1,2",
    ],
)
def test_a_series_out_of_shape_is_an_error(bad: object) -> None:
    with pytest.raises(ValueError, match="stored series"):
        series_span(bad)


def _doc() -> dict:
    """A small results document as a run writes it (series stored sparsely)."""
    a = [0.0, 0.0, 10.0, 20.5, 0.0, 0.0]
    b = [0.0, 30.0, 0.0, 0.0, 0.0, 0.0]
    return {
        "sample_interval_us": 2.0,
        "flows": [],
        "goodput_gbps_series": {"a": store_series(a), "b": store_series(b)},
        "plane_tx_gbps_series": {"plane0": store_series(a), "plane1": store_series([0.0] * 6)},
        "ev_tx_gbps_series": {},
    }


def _plain(doc: dict) -> dict:
    """``doc`` as an older openmrc wrote it: every series a plain list of samples."""
    old = dict(doc)
    for key in SERIES_KEYS:
        old[key] = {n: series_values(s) for n, s in doc[key].items()}
        assert all(isinstance(s, list) for s in old[key].values())
    return old


def test_an_old_plain_list_document_reads_as_the_new_one(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # (not tmp_path: these stand-in documents are not whole results.json documents)
    tmp_path = tmp_path_factory.mktemp("series")
    new, old = _doc(), _plain(_doc())
    for key in SERIES_KEYS:
        assert read_series(old, key) == read_series(new, key)
    assert read_series(new, "goodput_gbps_series")["a"] == [0.0, 0.0, 10.0, 20.5, 0.0, 0.0]
    assert total_series(old) == total_series(new) == (2.0, [0.0, 30.0, 10.0, 20.5, 0.0, 0.0])
    assert _aggregate(old) == _aggregate(new)
    assert planes_carrying(old) == planes_carrying(new) == 1
    for name, doc in (("old", old), ("new", new)):
        write(doc, tmp_path / name)
    csv_old = (tmp_path / "old" / "goodput.csv").read_text()
    assert csv_old == (tmp_path / "new" / "goodput.csv").read_text()
    assert "4.0,30.0,0.0,30.0" in csv_old  # time, total, a, b at the second interval
