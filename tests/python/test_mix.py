"""stoker.Mix (issue 16 item 5): datasets mixed by weight, deterministic, each source's share of
every epoch within one sample of its weight, sources that run out restart with a new
permutation, exact resume, equal ranks, every sample tagged with its source."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import stoker


def make(path, n: int, tag: int):
    with stoker.Writer(path, columns={"i": "int", "tag": "int"}, progress=False,
                       chunk_size="16KiB") as w:
        for i in range(n):
            w.write({"i": i, "tag": tag})
    return stoker.Dataset(path)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    return make(d / "a.stoker", 500, 0), make(d / "b.stoker", 90, 1), make(d / "c.stoker", 40, 2)


def items(loader):
    return [(s, x["i"]) for x, s in loader]


def test_shares_sources_and_restarts(sources):
    a, b, c = sources
    mix = stoker.Mix([a, b, c], weights=[5, 3, 2], epoch_size=301)
    assert mix.counts == [151, 90, 60]  # 150.5, 90.3, 60.2: the largest remainder gets the 1
    for n, w in zip(mix.counts, [0.5, 0.3, 0.2]):
        assert abs(n - w * 301) < 1
    seen = {0: [], 1: [], 2: []}
    loader = stoker.Loader(mix, seed=3)
    for epoch in range(3):
        got = items(loader)
        assert len(got) == 301
        counts = np.bincount([s for s, _ in got], minlength=3).tolist()
        assert counts == mix.counts  # every epoch, exactly
        for s, i in got:
            seen[s].append(i)
    # Each source is read as a stream of its own epochs: c (40 samples, 60 per mix epoch) is
    # read whole before any sample repeats, then again in a new order.
    c_stream = seen[2]
    for k in range(len(c_stream) // 40):
        assert sorted(c_stream[40 * k:40 * k + 40]) == list(range(40))
    assert c_stream[:40] != c_stream[40:80]
    assert len(set(seen[0])) == 453  # a: 151 per epoch, 3 epochs, no repeat yet


def test_deterministic_and_seeded(sources):
    mix = stoker.Mix(list(sources), weights=[1, 1, 1], epoch_size=200)
    one = items(stoker.Loader(mix, seed=1))
    assert one == items(stoker.Loader(mix, seed=1))
    assert one != items(stoker.Loader(mix, seed=2))
    assert items(stoker.Loader(pickle.loads(pickle.dumps(mix)), seed=1)) == one


@pytest.mark.parametrize("world", [2, 3])
def test_equal_ranks_and_resume_with_another_world_size(sources, world):
    mix = stoker.Mix(list(sources), weights=[0.6, 0.3, 0.1], epoch_size=300)
    whole = sorted(items(stoker.Loader(mix, seed=5)))
    ranks = [items(stoker.Loader(mix, seed=5, rank=r, world_size=world)) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1
    assert sorted(sum(ranks, [])) == whole
    # Rank 0 of `world` saves after 20 samples (all ranks read as many); 2 ranks continue.
    loaders = [stoker.Loader(mix, seed=5, rank=r, world_size=world) for r in range(world)]
    its = [iter(l) for l in loaders]
    first = [next(it) for it in its for _ in range(20)]
    state = loaders[0].state_dict()
    rest = []
    for r in range(2):
        resumed = stoker.Loader(mix, seed=5, rank=r, world_size=2)
        resumed.load_state_dict(state)
        rest += items(resumed)
    assert sorted([(s, x["i"]) for x, s in first] + rest) == whole


def test_batches_carry_their_sources_and_bad_mixes_are_refused(sources, tmp_path):
    a, b, _ = sources
    batch, src = next(iter(stoker.Loader(stoker.Mix([a, b]), batch_size=32, seed=0)))
    assert batch["tag"].tolist() == src.tolist()  # the tag column says the source too
    with pytest.raises(ValueError, match="weights"):
        stoker.Mix([a, b], weights=[1])
    with pytest.raises(ValueError, match="non-negative"):
        stoker.Mix([a, b], weights=[1, -1])
    with pytest.raises(ValueError, match="at least one"):
        stoker.Mix([])
    loader = stoker.Loader(stoker.Mix([a, b], epoch_size=50))
    with pytest.raises(ValueError, match="mix"):
        loader.load_state_dict(stoker.Loader(stoker.Mix([b, a], epoch_size=50)).state_dict())
