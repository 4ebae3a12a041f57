"""stoker.torch with a real torch.utils.data.DataLoader: worker processes (fork and spawn),
simulated ranks, DistributedSampler, pickling, elastic resume across ranks and workers."""
from __future__ import annotations

import itertools
import pickle
import shutil
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import stoker  # noqa: E402
import stoker.torch  # noqa: E402
from conftest import make_tree, pack_small_tree, sample_index_by_path  # noqa: E402

# This machine may have fewer cores than the tests' workers; torch warns, the tests don't care.
pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_small_tree(tmp_path_factory, "torch", seed=78)


@pytest.fixture(scope="module")
def index_of(packed):
    return sample_index_by_path(packed)


def paths(batch):
    """The sample paths in a DataLoader item: one (bytes, label, path) or a collated batch."""
    if isinstance(batch, (list, tuple)) and len(batch) == 3 and isinstance(batch[2], str):
        return [batch[2]]
    if isinstance(batch, (list, tuple)) and len(batch) == 3:  # default_collate: (.., .., paths)
        return list(batch[2])
    return [p for item in batch for p in paths(item)]


def collate_bytes(items):
    """default_collate cannot stack bytes; keep them, collate the rest."""
    return [x[0] for x in items], torch.tensor([x[1] for x in items]), [x[2] for x in items]


def run(loader, index_of, steps=None):
    return [index_of[p] for batch in itertools.islice(loader, steps) for p in paths(batch)]


def rank_plan(packed, world, rank, epoch=0, shuffle="chunk", seed=0, position=0, planned=None,
              drop_last=False):
    s = stoker.Sampler(stoker.Dataset(packed), mode=shuffle, seed=seed, drop_last=drop_last)
    return list(s.plan_rank(epoch, position, planned or world, world, rank)[0])


@pytest.mark.parametrize("workers,context", [(0, None), (2, "fork"), (3, "fork"),
                                             pytest.param(2, "spawn", marks=pytest.mark.slow)])
def test_dataloader_every_sample_once(packed, index_of, workers, context):
    n = len(index_of)
    world = 2
    datasets = [stoker.torch.StokerIterableDataset(packed, rank=r, world_size=world,
                                                   drop_last=True) for r in range(world)]
    epochs = (0, 1) if context != "spawn" else (0,)
    orders = []
    for epoch in epochs:
        got = []
        for r, ds in enumerate(datasets):
            ds.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=None, num_workers=workers,
                                multiprocessing_context=context)
            assert len(loader) == n // world
            samples = run(loader, index_of)
            # Fetching single samples, the round-robin over workers gives the rank's order.
            assert samples == rank_plan(packed, world, r, epoch, drop_last=True)
            got += samples
        assert len(got) == len(set(got)) == n - n % world
        orders.append(got)
    if len(orders) == 2:
        assert orders[0] != orders[1]


@pytest.mark.parametrize("block", [1, 4])
def test_dataloader_batches(packed, index_of, block):
    n, world, batch = len(index_of), 2, 4
    got = []
    for r in range(world):
        ds = stoker.torch.StokerIterableDataset(packed, rank=r, world_size=world,
                                                loader_batch_size=block, shuffle="full")
        loader = DataLoader(ds, batch_size=batch, num_workers=3, collate_fn=collate_bytes,
                            multiprocessing_context="fork")
        batches = list(loader)
        samples = [index_of[p] for b in batches for p in b[2]]
        plan = rank_plan(packed, world, r, shuffle="full")
        assert sorted(samples) == sorted(plan)
        if block == batch:  # whole batches per worker: batch j is plan[4j:4j+4]
            assert samples == plan
        assert torch.is_tensor(batches[0][1]) and len(batches[0][0]) == 4
        got += samples
    counts = Counter(got)
    assert len(counts) == n and len(got) == n + (-n % world)


@pytest.mark.parametrize("old,new", [((2, 2), (3, 3)), ((3, 0), (2, 2)), ((1, 3), (2, 0))])
def test_elastic_resume_across_ranks_and_workers(packed, index_of, old, new):
    """(world, workers) -> (world', workers'): consume k samples per rank, save rank 0's state
    with state_dict(samples_consumed=k), finish with the new job; nothing lost or repeated."""
    n = len(index_of)
    for k in (0, 5, 17):
        world, workers = old
        seen = []
        states = []
        for r in range(world):
            ds = stoker.torch.StokerIterableDataset(packed, rank=r, world_size=world,
                                                    shuffle="full", seed=7, drop_last=True)
            ds.set_epoch(2)
            loader = DataLoader(ds, batch_size=None, num_workers=workers,
                                multiprocessing_context="fork" if workers else None)
            seen += run(loader, index_of, k)
            # num_workers=0 counts by itself; with workers the caller says how many.
            states.append(ds.state_dict() if workers == 0 else ds.state_dict(samples_consumed=k))
        position = {(s["epoch"], s["position"], s["planned_world_size"]) for s in states}
        assert len(position) == 1
        assert (states[0]["epoch"], states[0]["position"]) == (2, k * world)
        world, workers = new
        for r in range(world):
            ds = stoker.torch.StokerIterableDataset(packed, rank=r, world_size=world,
                                                    shuffle="full", seed=7, drop_last=True)
            ds.load_state_dict(states[0])
            ds.set_epoch(2)  # the training loop's usual call keeps the loaded position
            loader = DataLoader(ds, batch_size=None, num_workers=workers,
                                multiprocessing_context="fork" if workers else None)
            seen += run(loader, index_of)
        counts = Counter(seen)
        assert max(counts.values()) == 1, (old, new, k)
        assert n - len(counts) == (n - k * old[0]) % new[0]  # only drop_last's tail


def test_worker_level_state(packed, index_of, monkeypatch):
    """What torchdata's StatefulDataLoader does: state_dict() inside each worker, and
    load_state_dict() of that state in the same worker of a new job."""
    workers, world = 3, 2
    base = stoker.torch.StokerIterableDataset(packed, rank=1, world_size=world, seed=4)
    plan = rank_plan(packed, world, 1, seed=4)
    current = {"worker": (0, 1)}
    monkeypatch.setattr(stoker.torch, "_worker", lambda: current["worker"])
    seen, states = [], []
    for w in range(workers):
        current["worker"] = (w, workers)
        copy = pickle.loads(pickle.dumps(base))
        seen += run(copy, index_of, 3 + w)
        states.append(copy.state_dict())
        assert states[-1]["worker"] == {"id": w, "num_workers": workers, "yielded": 3 + w,
                                        "loader_batch_size": 1}
    for w in range(workers):
        current["worker"] = (w, workers)
        copy = pickle.loads(pickle.dumps(base))
        copy.load_state_dict(states[w])
        seen += run(copy, index_of)
    assert sorted(seen) == sorted(plan)
    current["worker"] = (1, workers)
    with pytest.raises(ValueError, match="same worker"):
        pickle.loads(pickle.dumps(base)).load_state_dict(states[0])


def test_map_dataset_with_distributed_sampler(packed, index_of):
    n = len(index_of)
    got = []
    for r in range(2):
        ds = stoker.torch.StokerMapDataset(packed, transform=lambda item: item[2])
        assert len(ds) == n
        sampler = DistributedSampler(ds, num_replicas=2, rank=r, shuffle=True, seed=1)
        sampler.set_epoch(3)
        loader = DataLoader(ds, batch_size=5, sampler=sampler, num_workers=2,
                            multiprocessing_context="fork")
        samples = [index_of[p] for batch in loader for p in batch]
        assert samples == [index_of[ds[i]] for i in sampler]
        got += samples
    counts = Counter(got)
    assert len(counts) == n and len(got) == n + n % 2  # DistributedSampler pads to even


def test_pickling(packed, index_of, tmp_path):
    ds = stoker.torch.StokerIterableDataset(packed, shuffle="full", seed=2, rank=0,
                                            world_size=1)
    ds.load_state_dict({"epoch": 1, "position": 10, "planned_world_size": 2})
    blob = pickle.dumps(ds)
    assert len(blob) < 2000  # URI and options only, no handles or orders
    copy = pickle.loads(blob)
    assert copy._order._ds is None and copy.dataset_version == ds.dataset_version
    assert run(copy, index_of) == run(ds, index_of) == rank_plan(
        packed, 1, 0, epoch=1, shuffle="full", seed=2, position=10, planned=2)

    m = stoker.torch.StokerMapDataset(packed)
    m2 = pickle.loads(pickle.dumps(m))
    assert m2._ds is None and len(m2) == len(m) and m2[5] == m[5] and m2._ds is not None

    # Copies are pinned to the version the main process opened: after a new version is
    # published they still read that version (every version stays readable), so workers never
    # mix samples of two versions.
    own = str(tmp_path / "ds")
    shutil.copytree(packed, own)
    map1 = stoker.torch.StokerMapDataset(own)
    iter1 = stoker.torch.StokerIterableDataset(own, shuffle="full", seed=2, rank=0, world_size=1)
    pinned_map, pinned_iter = pickle.dumps(map1), pickle.dumps(iter1)
    want_map = [map1[i] for i in range(len(map1))]
    want_iter = run(iter1, index_of)
    src = tmp_path / "more"
    more = make_tree(src, seed=5, classes=1, files_per_class=2, prefix="more-")
    stoker.pack(str(src), own, chunk_size=8192, append=True)
    assert len(stoker.torch.StokerMapDataset(own)) == len(index_of) + len(more)
    old_map = pickle.loads(pinned_map)
    assert old_map.dataset_version == 1 and len(old_map) == len(index_of)
    assert [old_map[i] for i in range(len(old_map))] == want_map
    old_iter = pickle.loads(pinned_iter)
    assert old_iter.dataset_version == 1 and len(old_iter) == len(index_of)
    assert run(old_iter, index_of) == want_iter


def test_import_stoker_without_torch():
    import subprocess
    import sys
    code = ("import sys; import stoker; assert 'torch' not in sys.modules; "
            "stoker.Loader; import stoker.torch; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 17, 40])
def test_torchdata_stateful_dataloader_resume(packed, index_of, workers, cut):
    """torchdata's StatefulDataLoader saves the dataset's state (per worker) and restores it in a
    fresh loader: the resumed epoch delivers exactly the samples not yet seen."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make():
        ds = stoker.torch.StokerIterableDataset(packed, shuffle="chunk", window=2, seed=4,
                                                rank=0, world_size=1,
                                                transform=lambda s: s[2])
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=workers,
                                      multiprocessing_context="fork" if workers else None)

    first = make()
    it = iter(first)
    seen = [next(it) for _ in range(cut)]
    state = first.state_dict()
    del it
    second = make()
    second.load_state_dict(state)
    rest = list(second)
    counts = Counter(index_of[p] for p in seen + rest)
    assert sorted(counts) == list(range(len(index_of)))
    assert set(counts.values()) == {1}
