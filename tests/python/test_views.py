"""Dataset views (issue 16 item 6): ds.subset(indices) and ds.filter(predicate), taken by every
loader with equal ranks and exact resume."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import stoker


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("views") / "d.stoker"
    with stoker.Writer(path, columns={"i": "int", "label": "int", "x": "bytes"},
                       progress=False, chunk_size="64KiB") as w:
        for i in range(600):
            w.write({"i": i, "label": i % 6, "x": bytes(i % 500)})
    return stoker.Dataset(path)


def ids(samples) -> list[int]:
    return [s["i"] for s in samples]


def test_subset_indexes_the_base(ds):
    v = ds.subset(range(0, 600, 7))
    assert len(v) == 86 and v[0]["i"] == 0 and v[-1]["i"] == 595 and v[3]["i"] == 21
    assert v.columns == ds.columns and v.version == ds.version
    assert ids(v.subset([1, -1])[i] for i in range(2)) == [7, 595]
    assert isinstance(v, stoker.DatasetView)
    with pytest.raises(IndexError, match="600 out of range"):
        ds.subset([1, 600])
    with pytest.raises(ValueError, match="repeat"):
        ds.subset([1, 2, 1])
    assert pickle.loads(pickle.dumps(v))[5]["i"] == 35


def test_filter_by_function_and_by_column(ds):
    odd = ds.filter(lambda s: s["i"] % 2 == 1)
    assert ids(odd[i] for i in range(len(odd))) == list(range(1, 600, 2))
    threes = odd.filter({"label": lambda v: v == 3})  # of odd i: i % 6 == 3
    assert ids(threes[i] for i in range(len(threes))) == list(range(3, 600, 6))
    with pytest.raises(ValueError, match="not columns"):
        ds.filter({"nope": bool})
    with pytest.raises(TypeError):
        ds.filter(3)


@pytest.mark.parametrize("shuffle", ["chunk", "full", "sequential"])
def test_loaders_read_a_view_with_equal_ranks(ds, shuffle):
    v = ds.filter({"label": lambda v: v in (0, 1, 2)})
    want = sorted(v[i]["i"] for i in range(len(v)))
    ranks = [ids(stoker.Loader(v, shuffle=shuffle, seed=4, rank=r, world_size=3))
             for r in range(3)]
    assert len({len(r) for r in ranks}) == 1
    assert sorted(sum(ranks, [])) == want  # 300 samples: 3 ranks divide it


def test_a_view_resumes_exactly(ds):
    v = ds.subset(np.arange(0, 600, 3)[::-1])  # any order
    loader = stoker.Loader(v, batch_size=10, seed=2)
    it = iter(loader)
    first = [b["i"].tolist() for b in (next(it) for _ in range(7))]
    state = loader.state_dict()
    again = stoker.Loader(v, batch_size=10, seed=2)
    again.load_state_dict(state)
    rest = [b["i"].tolist() for b in again]
    whole = [b["i"].tolist() for b in stoker.Loader(v, batch_size=10, seed=2)]
    assert first + rest == whole
    assert sorted(sum(whole, [])) == list(range(0, 600, 3))


def test_a_state_saved_on_another_view_is_refused(ds):
    """Two views of the same size (labels 0 and 1: 100 samples each) have the same count but
    other samples: the position would name other samples, so the state is refused, as it is
    between a view and the whole dataset."""
    zeros = ds.filter({"label": lambda label: label == 0})
    ones = ds.filter({"label": lambda label: label == 1})
    loader = stoker.Loader(zeros, shuffle="full", seed=1)
    it = iter(loader)
    for _ in range(10):
        next(it)
    state = loader.state_dict()
    for other in (ones, ds):
        with pytest.raises(ValueError, match="view=|num_samples="):
            stoker.Loader(other, shuffle="full", seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="view="):  # same count, other samples: the view says
        stoker.Loader(ones, shuffle="full", seed=1).load_state_dict(state)
    stoker.Loader(zeros, shuffle="full", seed=1).load_state_dict(state)  # its own view: fine


def test_a_replaced_iterator_stops_instead_of_reading_twice(ds):
    """iter() again continues the epoch in the new iterator; the old one then raises rather
    than reading the same samples a second time (as set_epoch and load_state_dict do)."""
    loader = stoker.Loader(ds, shuffle="full", seed=1)
    first = iter(loader)
    head = [next(first)["i"] for _ in range(5)]
    second = iter(loader)
    rest = [s["i"] for s in second]
    assert sorted(head + rest) == list(range(600))
    with pytest.raises(RuntimeError, match="replaced by a newer iter"):
        next(first)
    third = iter(loader)
    next(third)
    loader.set_epoch(5)
    with pytest.raises(RuntimeError, match="replaced"):
        next(third)


def test_views_and_options_that_do_not_fit(ds, tmp_path):
    with pytest.raises(ValueError, match="whole chunks"):
        stoker.Loader(ds.subset([1, 2]), block_size=4096)



def test_subset_takes_a_mask_a_slice_and_integer_arrays(ds):
    mask = np.array([i % 4 == 1 for i in range(600)])
    for m in (mask, mask.tolist()):  # issue 37 item 9a: a mask read as 0s and 1s "repeated"
        v = ds.subset(m)
        assert ids(v[i] for i in range(len(v))) == list(range(1, 600, 4))
    assert ids(ds.subset(slice(590, None, 3))[i] for i in range(4)) == [590, 593, 596, 599]
    for dtype in (np.int32, np.uint16, np.int64):
        assert ids(ds.subset(np.array([5, 0, 599], dtype=dtype))[i] for i in range(3)) == [
            5, 0, 599]
    assert ds.subset(np.array([-1], dtype=np.int8))[0]["i"] == 599
    assert len(ds.subset([])) == 0
    assert ids(ds.subset(range(10)).subset(np.arange(10) >= 8)[i] for i in range(2)) == [8, 9]
    with pytest.raises(ValueError, match=r"one value per sample: 600 of them, not shape \(599,\)"):
        ds.subset(mask[:-1])
    with pytest.raises(TypeError, match="integers .or a boolean mask., not float64"):
        ds.subset([1.5, 2.0])


def test_filter_a_file_dataset_by_label_and_path(tmp_path, tree):
    root, _ = tree  # class00/ .. class02/, 20 files each
    stoker.pack(str(root), str(tmp_path / "ds"), progress=False)
    files = stoker.Dataset(tmp_path / "ds")
    twos = files.filter({"label": lambda v: v == 2})  # issue 37 item 9b: "not columns"
    assert len(twos) == 20
    assert all(twos[i][1] == 2 and twos[i][2].startswith("class02/") for i in range(20))
    nested = files.filter({"path": lambda p: "/nested/" in p, "label": lambda v: v < 2})
    assert sorted(nested[i][2] for i in range(len(nested))) == sorted(
        files[i][2] for i in range(len(files))
        if "/nested/" in files[i][2] and files[i][1] < 2)
    with pytest.raises(ValueError, match=r"\['class'\] are not keys of a file dataset's samples "
                                         r"\(its keys: 'label', the class index; 'path'\)"):
        files.filter({"class": bool})
