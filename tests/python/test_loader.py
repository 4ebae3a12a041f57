"""stoker.Loader and stoker.Sampler: order, distribution over ranks, epochs, exact elastic resume.

Ranks are simulated by constructing one Loader per rank with rank/world_size. The dataset has
77 samples in ~20 small chunks, so 2, 3 and 4 ranks do not divide it (padding and drop_last
matter) and chunk mode has chunks to shuffle.
"""
from __future__ import annotations

import io
import itertools
import json
import logging
import os
import pickle
import random
import re
import subprocess
import sys
import tarfile
import time
from collections import Counter

import pytest

import stoker
from conftest import make_tree, pack_small_tree

MODES = ["sequential", "full", "chunk"]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack_small_tree(tmp_path_factory, "loader", seed=77)


@pytest.fixture(scope="module")
def ds(packed):
    return stoker.Dataset(packed)


@pytest.fixture(scope="module")
def index_of(ds):
    return {ds.sample_files(i)[0]: i for i in range(len(ds))}


def path_of(item):
    return item[2]


def read(loader, index_of, steps=None):
    """Sample indices the loader yields (all, or the first `steps` items), batches flattened."""
    out = []
    # islice takes exactly `steps` items, as a training loop that stops after `steps` does.
    for item in itertools.islice(loader, steps):
        out.extend(index_of[p] for p in (item if isinstance(item, list) else [item]))
    return out


def loaders(ds, world, **kwargs):
    kwargs.setdefault("transform", path_of)
    return [stoker.Loader(ds, rank=r, world_size=world, **kwargs) for r in range(world)]


def check_covered(samples, n, drop_last, world, padded_expected=None):
    """Every sample once, except that padding repeats some (drop_last=False) or the epoch's last
    n mod world are skipped (drop_last=True)."""
    counts = Counter(samples)
    assert set(counts) <= set(range(n))
    if drop_last:
        assert max(counts.values()) == 1
        assert len(counts) == n - n % world
    else:
        assert len(counts) == n, f"lost samples: {sorted(set(range(n)) - set(counts))}"
        assert len(samples) - n == (padded_expected if padded_expected is not None
                                    else -n % world)


def test_sampler_orders_are_permutations(ds):
    n = len(ds)
    for mode in MODES:
        s = stoker.Sampler(ds, mode=mode, seed=3, window=2)
        assert (s.num_samples, s.mode, s.seed, s.window) == (n, mode, 3, 2)
        for world in (1, 2, 3):
            g = s.global_order(0, world)
            assert g.format == "I" and sorted(g) == list(range(n))
            for rank in range(world):
                plan, padded, dropped = s.plan_rank(0, 0, world, world, rank)
                expected = [g[q % n] for q in range(rank, n + (-n % world), world)]
                # The last round's missing positions (n, n+1, ...) go to the highest ranks.
                assert list(plan) == expected
                assert padded == (1 if n % world and rank >= n % world else 0)
                assert dropped == 0
    # Sequential is storage order: chunk after chunk (chunk ids grow with the chunk index),
    # ascending index within a chunk; packed in mixed order, that is not index order.
    storage = sorted(range(n), key=lambda i: (ds.stat(i)["chunk_index"], i))
    assert storage != list(range(n))
    assert list(stoker.Sampler(ds, mode="sequential").global_order(5)) == storage
    with pytest.raises(ValueError, match="shuffle mode"):
        stoker.Sampler(ds, mode="random")
    with pytest.raises(ValueError, match="window"):
        stoker.Sampler(ds, window=0)
    with pytest.raises(ValueError, match="rank"):
        stoker.Sampler(ds).plan_rank(0, 0, 1, 2, 2)
    with pytest.raises(TypeError):
        stoker.Sampler("not a dataset")


def test_sampler_chunk_mode_reads_chunks_together(ds):
    chunk = [ds.stat(ds.sample_files(i)[0])["chunk"] for i in range(len(ds))]
    assert len(set(chunk)) >= 10
    s = stoker.Sampler(ds, mode="chunk", seed=1, window=1)
    for epoch in range(3):
        order = [chunk[i] for i in s.global_order(epoch, 1)]
        runs = [c for k, c in enumerate(order) if k == 0 or order[k - 1] != c]
        assert len(runs) == len(set(order)), "window=1: each chunk's samples are contiguous"
    # Chunk order differs between epochs.
    firsts = {tuple(dict.fromkeys(chunk[i] for i in s.global_order(e, 1))) for e in range(4)}
    assert len(firsts) > 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_per_epoch(ds, index_of, mode, drop_last):
    n = len(ds)
    for world in (1, 2, 3):
        per_rank = [read(l, index_of) for l in loaders(ds, world, shuffle=mode, seed=5,
                                                         window=3, drop_last=drop_last)]
        expected_count = n // world if drop_last else -(-n // world)
        assert [len(p) for p in per_rank] == [expected_count] * world
        check_covered([s for p in per_rank for s in p], n, drop_last, world)
        g = stoker.Sampler(ds, mode=mode, seed=5, window=3).global_order(0, world)
        for rank, got in enumerate(per_rank):  # rank r reads G[r::world]
            assert got == [g[q % n] for q in range(rank, world * expected_count, world)]


def test_determinism_and_epochs(ds, index_of):
    n = len(ds)
    a = read(stoker.Loader(ds, shuffle="full", seed=9, transform=path_of), index_of)
    b = read(stoker.Loader(ds.uri, shuffle="full", seed=9, transform=path_of), index_of)
    c = read(stoker.Loader(ds, shuffle="full", seed=10, transform=path_of), index_of)
    assert a == b and a != c and sorted(a) == list(range(n))
    seq = stoker.Loader(ds, shuffle="sequential", transform=path_of)
    storage = sorted(range(n), key=lambda i: (ds.stat(i)["chunk_index"], i))  # chunk after chunk
    assert read(seq, index_of) == storage == read(seq, index_of)

    # A finished pass moves to the next epoch; set_epoch goes back.
    for mode in ("full", "chunk"):
        loader = stoker.Loader(ds, shuffle=mode, seed=2, transform=path_of)
        e0 = read(loader, index_of)
        assert loader.epoch == 1
        e1 = read(loader, index_of)
        assert loader.epoch == 2 and e0 != e1 and sorted(e0) == sorted(e1) == list(range(n))
        loader.set_epoch(0)
        assert read(loader, index_of) == e0
        loader.set_epoch(1)
        assert read(loader, index_of) == e1


def test_batches_and_len(ds, index_of):
    n = len(ds)
    loader = stoker.Loader(ds, batch_size=10, shuffle="full", transform=path_of,
                           rank=1, world_size=2)
    assert len(loader) == 4  # 39 samples
    batches = list(loader)
    assert [len(b) for b in batches] == [10, 10, 10, 9] and all(isinstance(b, list)
                                                                 for b in batches)
    dropped = stoker.Loader(ds, batch_size=10, shuffle="full", drop_last=True, rank=1,
                            world_size=2, collate=len)
    assert len(dropped) == 3 and list(dropped) == [10, 10, 10]
    single = stoker.Loader(ds, rank=2, world_size=3)
    assert len(single) == 26
    data, label, path = next(iter(single))
    assert isinstance(data, bytes) and ds.read(path) == data and label >= 0
    with pytest.raises(ValueError):
        stoker.Loader(ds, batch_size=0)
    with pytest.raises(ValueError):
        stoker.Loader(ds, shuffle="nope")
    assert len(stoker.Loader(ds, shuffle="sequential")) == n


def test_env_defaults(ds, index_of, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = stoker.Loader(ds)
    assert (loader.rank, loader.world_size) == (0, 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = stoker.Loader(ds, shuffle="full", seed=4, transform=path_of)
    assert (loader.rank, loader.world_size) == (1, 3)
    g = stoker.Sampler(ds, mode="full", seed=4).global_order(0, 3)
    assert read(loader, index_of) == [g[q % len(ds)] for q in range(1, 78, 3)]
    assert stoker.Loader(ds, rank=0).rank == 0  # arguments win over the environment
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match="rank 3"):
        stoker.Loader(ds)


def run_elastic_epoch(ds, index_of, rng, mode, drop_last):
    """Runs one epoch as a job that is stopped and resumed 0-3 times, each time with a random
    number of ranks (1-4) that all stop after the same random number of steps; the next job's
    loaders load rank 0's state. Returns every sample index read, the expected number of padded
    repeats, and the last world size."""
    n = len(ds)
    state, seen, padded = None, [], 0
    cuts = rng.randint(0, 3)
    for segment in range(cuts + 1):
        world = rng.randint(1, 4)
        ranks = loaders(ds, world, shuffle=mode, seed=11, window=2, drop_last=drop_last)
        if state is not None:
            for l in ranks:
                l.load_state_dict(state)
        start = ranks[0].state_dict()["position"]
        remaining = n - start
        count = remaining // world if drop_last else -(-remaining // world)
        if segment == cuts:  # the last job reads to the end of the epoch
            if count == 0:  # nothing this world can read: iterating would start epoch 1
                return seen, padded, world
            got = [read(l, index_of) for l in ranks]
            assert [len(g) for g in got] == [count] * world
            assert all(l.epoch == 1 for l in ranks)
            seen += [s for g in got for s in g]
            padded += count * world - remaining
            return seen, padded, world
        steps = rng.randint(0, max(0, count - 1))  # stop before the end of the epoch
        got = [read(l, index_of, steps) for l in ranks]
        states = [l.state_dict() for l in ranks]
        assert len({(s["epoch"], s["position"], s["planned_world_size"]) for s in states}) == 1
        state = states[0]
        assert (state["epoch"], state["position"], state["samples_yielded"]) == (
            0, start + steps * world, steps)
        seen += [s for g in got for s in g]
    raise AssertionError("unreachable")


@pytest.mark.parametrize("mode", MODES)
def test_elastic_resume_random_cuts(ds, index_of, mode):
    rng = random.Random(MODES.index(mode))
    n = len(ds)
    for trial in range(40):
        drop_last = trial % 3 == 2
        seen, padded, last_world = run_elastic_epoch(ds, index_of, rng, mode, drop_last)
        counts = Counter(seen)
        if drop_last:
            assert max(counts.values()) == 1, trial
            assert n - len(counts) < last_world, trial  # only the final round's tail
        else:
            assert len(counts) == n, (trial, sorted(set(range(n)) - set(counts)))
            assert len(seen) - n == padded, trial


def test_resume_with_batches_and_order(ds, index_of):
    # R=2 reads 3 batches of 4 per rank, R'=3 finishes: the concatenation is exactly G(R=2)'s
    # prefix followed by the rest of G dealt over 3 ranks.
    n = len(ds)
    first = loaders(ds, 2, shuffle="chunk", seed=1, batch_size=4)
    before = [read(l, index_of, 3) for l in first]
    state = first[0].state_dict()
    assert state["position"] == 24 and state["planned_world_size"] == 2
    g = stoker.Sampler(ds, mode="chunk", seed=1).global_order(0, 2)
    assert sorted(before[0] + before[1]) == sorted(g[:24])
    second = loaders(ds, 3, shuffle="chunk", seed=1, batch_size=4)
    for l in second:
        l.load_state_dict(pickle.loads(pickle.dumps(state)))
    after = [read(l, index_of) for l in second]
    for r in range(3):
        assert after[r] == [g[q % n] for q in range(24 + r, 24 + 3 * 18, 3)]
    # The next epoch is planned for the new world size.
    assert second[0].state_dict()["epoch"] == 1
    assert second[0].state_dict()["planned_world_size"] == 3


def test_resume_at_epoch_end_and_set_epoch(ds, index_of):
    n = len(ds)
    loader = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    e0 = read(loader, index_of, n)  # every sample taken, the pass not yet finished
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (0, n)
    resumed = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    resumed.load_state_dict(state)
    e1 = read(resumed, index_of)  # nothing left of epoch 0: epoch 1 starts
    assert sorted(e1) == list(range(n)) and e1 != e0 and resumed.epoch == 2
    # Unless set_epoch picks the finished epoch: then there is nothing left to read.
    explicit = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    explicit.load_state_dict(state)
    explicit.set_epoch(0)
    assert len(explicit) == 0 and read(explicit, index_of) == [] and explicit.epoch == 1

    # set_epoch for the epoch a state is in keeps its position; another epoch starts over.
    mid = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    head = read(mid, index_of, 30)
    saved = mid.state_dict()
    again = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    again.load_state_dict(saved)
    again.set_epoch(0)
    assert len(again) == n - 30
    assert head + read(again, index_of) == e0
    again.load_state_dict(saved)
    again.set_epoch(1)
    assert read(again, index_of) == e1

    # Leaving a loop and iterating again continues the epoch.
    cont = stoker.Loader(ds, shuffle="full", seed=3, transform=path_of)
    assert read(cont, index_of, 10) + read(cont, index_of) == e0


def test_load_state_dict_rejects_other_orders(ds, index_of):
    state = stoker.Loader(ds, shuffle="full", seed=1).state_dict()
    for kwargs in ({"seed": 2}, {"shuffle": "chunk"}):
        with pytest.raises(ValueError, match="order would differ"):
            stoker.Loader(ds, **{"shuffle": "full", "seed": 1, **kwargs}).load_state_dict(state)
    with pytest.raises(ValueError, match="position"):
        stoker.Loader(ds).load_state_dict({"epoch": 0})
    # Only ints, strs and bools: safe for torch.save, json, any checkpoint format.
    assert all(isinstance(v, (int, str, bool)) for v in state.values())


def test_tar_grouped_samples(tmp_path):
    tars = []
    for shard in range(3):
        path = tmp_path / f"shard-{shard}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(7):
                for ext, data in (("jpg", bytes([shard, i]) * 50), ("cls", b"%d" % (i % 2))):
                    info = tarfile.TarInfo(f"s{shard}/k{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        tars.append(str(path))
    stoker.pack(tars, str(tmp_path / "ds"), chunk_size=4096)
    ds = stoker.Dataset(str(tmp_path / "ds"))
    assert len(ds) == 21
    keys = []
    for rank in range(2):
        for members, _, key in stoker.Loader(ds, shuffle="chunk", rank=rank, world_size=2,
                                             drop_last=True):
            assert set(members) == {"jpg", "cls"}
            keys.append(key)
    assert len(keys) == 20 and len(set(keys)) == 20


def test_shuffle_report_python_call_matches_the_cli(tmp_path, stoker_exe):
    """stoker.shuffle_report and `stoker shuffle-report --json` measure the same orders."""
    import json
    import subprocess

    src = tmp_path / "src"
    for c in range(4):
        for i in range(30):
            p = src / f"class{c}" / f"{i:03d}.bin"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(bytes([c, i]) * 300)
    dst = tmp_path / "ds"
    stoker.pack(str(src), str(dst), chunk_size=4096, order="path")
    rows = stoker.shuffle_report(stoker.Dataset(str(dst)), batch_size=16, windows=[1, 4])
    assert [(r["mode"], r["window"], r["loader_default"]) for r in rows] == [
        ("sequential", 0, False), ("full", 0, False), ("chunk", 1, False), ("chunk", 4, False),
        ("chunk", 16, True)]
    seq, full = rows[0], rows[1]
    # Class by class: the loader's default reads blocks of chunks, more reads than chunk W=4.
    assert rows[-1]["block_bytes"] > 0
    assert rows[-1]["reads_per_epoch"] > rows[2]["reads_per_epoch"]
    assert rows[-1]["batch_distinct_classes"] > rows[3]["batch_distinct_classes"]
    assert seq["storage_order_correlation"] == pytest.approx(1.0)
    assert full["batch_distinct_classes"] > seq["batch_distinct_classes"]
    cli = json.loads(subprocess.run(
        [stoker_exe, "shuffle-report", str(dst), "--batch-size", "16", "--windows", "1,4",
         "--json"], check=True, capture_output=True, text=True).stdout)
    assert len(cli) == len(rows)
    for py, js in zip(rows, cli):
        assert py["batch_label_entropy_bits"] == pytest.approx(js["batch_label_entropy_bits"])
        assert py["same_chunk_neighbours"] == pytest.approx(js["same_chunk_neighbours"])
        assert py["reads_per_epoch"] == js["reads_per_epoch"]


def test_loader_reads_through_the_pipeline_with_exact_bytes(packed, ds):
    """The Loader's bytes come from the read pipeline (coalesced range reads) and equal ds[i]."""
    loader = stoker.Loader(packed, shuffle="chunk", window=2, seed=3, memory_budget=1 << 20)
    got = {path: data for data, _label, path in loader}
    assert len(got) == len(ds)
    for i in range(len(ds)):
        data, _label, path = ds[i]
        assert got[path] == data
    stats = loader.stats()
    assert stats["samples"] == len(ds)
    assert stats["engine"] in ("io_uring", "threads")
    assert 0 < stats["ranges"] < len(ds), "neighbouring samples were read in shared ranges"
    assert stats["peak_bytes_held"] <= 1 << 20


def test_a_budget_smaller_than_two_windows_warns(tmp_path):
    """Below 2 x window x largest chunk a window's chunks are read in pieces (and much of them
    twice): the Loader says so, with what to do, and still delivers every sample once."""
    src, dst = tmp_path / "src", tmp_path / "ds"
    make_tree(src, seed=9, classes=2, files_per_class=40, max_size=4000)
    stoker.pack(str(src), str(dst), chunk_size=16 << 10)
    ds = stoker.Dataset(str(dst))
    assert ds.largest_chunk_bytes > 0
    small = 2 * 4 * ds.largest_chunk_bytes - 1
    with pytest.warns(UserWarning, match=r"lower window to 3\."):
        got = [path for _data, _label, path in
               stoker.Loader(str(dst), shuffle="chunk", window=4, memory_budget=small)]
    assert sorted(got) == sorted(ds[i][2] for i in range(len(ds)))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default budget, or a large one: no warning
        list(stoker.Loader(str(dst), shuffle="chunk", window=4))
        list(stoker.Loader(str(dst), shuffle="chunk", window=4, memory_budget=small + 1))
        list(stoker.Loader(str(dst), shuffle="full", memory_budget=1 << 16))
        # A window larger than the dataset: the budget for all of its chunks is enough.
        all_chunks = 2 * ds.num_chunks * ds.largest_chunk_bytes
        assert ds.num_chunks < 64
        list(stoker.Loader(str(dst), shuffle="chunk", window=64, memory_budget=all_chunks))


def test_loader_raises_corruption_naming_the_file(tmp_path):
    src = tmp_path / "src"
    make_tree(src, seed=5, classes=2, files_per_class=5, max_size=3000)
    dst = tmp_path / "ds"
    stoker.pack(str(src), str(dst))
    chunk = next((dst / "chunks").iterdir())
    raw = bytearray(chunk.read_bytes())
    raw[40] ^= 0x01  # inside the first file's bytes (after the 32-byte header)
    chunk.write_bytes(bytes(raw))
    clean = stoker.Dataset(str(dst))
    hit = [clean.stat(f)["path"] for f in range(clean.num_files)
           if clean.stat(f)["offset"] <= 40 < clean.stat(f)["offset"] + clean.stat(f)["size"]]
    assert len(hit) == 1
    loader = stoker.Loader(str(dst), shuffle="sequential")
    with pytest.raises(stoker.CorruptionError, match=re.escape(hit[0])):
        for _ in loader:
            pass


def _class_tree(root, classes, per_class, size=600, labelled=True):
    for c in range(classes):
        for i in range(per_class):
            p = root / (f"class{c:02d}" if labelled else "") / f"{c:02d}-{i:03d}.bin"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(bytes([c, i % 256]) * (size // 2))


def test_loader_mixes_class_ordered_data_by_default_and_warns_once(tmp_path):
    """A dataset stored class by class (--order path) is read in blocks of its chunks by
    default, with one warning naming the fix; every sample still comes exactly once per rank,
    and the shuffle unit is part of the resume state."""
    import warnings

    src = tmp_path / "src"
    _class_tree(src, classes=20, per_class=40)
    dst = tmp_path / "by-path"
    stoker.pack(str(src), str(dst), chunk_size=8192, order="path")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = stoker.Loader(str(dst), batch_size=32, window=2, seed=1)
        again = stoker.Loader(str(dst), batch_size=32, window=2, seed=1)
    mixing = [w for w in caught if "stores its classes together" in str(w.message)]
    assert len(mixing) == 1, [str(w.message) for w in caught]
    assert "stoker pack SRC DST" in str(mixing[0].message)
    assert loader.block_size == again.block_size > 0
    assert stoker.Loader(str(dst), batch_size=32, window=2, block_size=0).block_size == 0

    def classes_per_batch(ldr):
        batches = list(ldr)
        assert sorted(path for b in batches for _, _, path in b) == sorted(
            stoker.Dataset(str(dst))[i][2] for i in range(800))
        return sum(len({label for _, label, _ in b}) for b in batches) / len(batches)

    whole = stoker.Loader(str(dst), batch_size=32, window=2, seed=1, block_size=0)
    full = stoker.Loader(str(dst), batch_size=32, shuffle="full", seed=1)
    assert classes_per_batch(whole) < 5 < 0.9 * classes_per_batch(full) < classes_per_batch(loader)

    state = loader.state_dict()
    assert state["block_size"] == loader.block_size
    with pytest.raises(ValueError, match="block_size"):
        stoker.Loader(str(dst), batch_size=32, window=2, seed=1, block_size=0).load_state_dict(state)
    # A state saved before block_size existed was read in whole chunks: refused by a loader
    # that reads blocks, taken by one that reads whole chunks.
    old_state = {k: v for k, v in state.items() if k != "block_size"}
    with pytest.raises(ValueError, match="block_size"):
        loader.load_state_dict(old_state)
    stoker.Loader(str(dst), batch_size=32, window=2, seed=1, block_size=0).load_state_dict(old_state)
    with pytest.raises(ValueError, match="mean sample"):
        stoker.Loader(str(dst), window=2, block_size=100)

    # Ranks still split the epoch exactly.
    seen = []
    for rank in range(3):
        r = stoker.Loader(str(dst), window=2, seed=1, rank=rank, world_size=3, drop_last=True)
        seen += [path for _, _, path in r]
    assert len(seen) == len(set(seen)) == 800 - 800 % 3


def test_loader_does_not_warn_when_there_is_nothing_to_mix(tmp_path):
    """Mixed storage (the pack default), no labels, or a single class: whole chunks, no warning."""
    import warnings

    cases = {}
    src = tmp_path / "mixed-src"
    _class_tree(src, classes=20, per_class=40)
    stoker.pack(str(src), str(tmp_path / "mixed"), chunk_size=8192)
    cases["mixed"] = tmp_path / "mixed"
    src = tmp_path / "flat-src"
    _class_tree(src, classes=20, per_class=40, labelled=False)
    stoker.pack(str(src), str(tmp_path / "flat"), chunk_size=8192, order="path")
    cases["unlabelled"] = tmp_path / "flat"
    src = tmp_path / "one-src"
    _class_tree(src, classes=1, per_class=200)
    stoker.pack(str(src), str(tmp_path / "one"), chunk_size=8192, order="path")
    cases["one class"] = tmp_path / "one"
    for name, path in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loader = stoker.Loader(str(path), batch_size=32, window=2)
            assert loader.block_size == 0, name
            assert len(list(loader)) > 0
        # shuffle_unit says why.
        unit = stoker.shuffle_unit(stoker.Dataset(str(path)), window=2, batch_size=32)
        assert unit["mixes_well"] and unit["block_size"] == 0, (name, unit)


def test_blocks_with_a_budget_smaller_than_a_block_and_a_window_larger_than_the_data(tmp_path):
    """Edges of the shuffle unit: a memory budget below one block reads in pieces (warned about,
    every sample once, never more than the budget held); a window larger than the dataset keeps
    whole chunks (one window is everything)."""
    import warnings

    src = tmp_path / "src"
    _class_tree(src, classes=20, per_class=40, size=1000)
    dst = tmp_path / "by-path"
    stoker.pack(str(src), str(dst), chunk_size=16384, order="path")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = stoker.Loader(str(dst), window=2, seed=4, memory_budget=1500)
        paths = [path for _, _, path in loader]
    assert loader.block_size > 1500
    assert any("memory_budget" in str(w.message) for w in caught)
    assert len(paths) == len(set(paths)) == 800
    assert loader.stats()["peak_bytes_held"] <= 1500

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = stoker.Loader(str(dst), window=10_000, batch_size=32)
    assert big.block_size == 0
    assert len([p for b in big for _, _, p in b]) == 800


def test_a_node_daemon_that_is_not_there_is_named_once(tmp_path):
    """STOKER_NODE pointing at no daemon: every sample still arrives (from the store), one
    warning says why, and stats() counts the failures and the store reads."""
    src, dst = tmp_path / "src", tmp_path / "ds"
    make_tree(src, seed=5, classes=2, files_per_class=30, max_size=3000)
    stoker.pack(str(src), str(dst), chunk_size=8 << 10)
    script = (
        "import json, stoker\n"
        f"loader = stoker.Loader({str(dst)!r}, shuffle='chunk', seed=1)\n"
        "n = sum(1 for _ in loader)\n"
        "print(json.dumps({'n': n, **{k: v for k, v in loader.stats().items() "
        "if k.startswith(('node', 'store'))}}))\n")
    env = dict(os.environ, STOKER_NODE=str(tmp_path / "no-daemon.sock"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["n"] == 60 and out["store_reads"] > 0 and out["node_reads"] == 0
    assert out["node_failures"] >= 1
    warnings = [line for line in proc.stderr.splitlines() if "STOKER_NODE" in line]
    assert len(warnings) == 1 and "no-daemon.sock" in warnings[0] \
        and "reading from the store instead" in warnings[0], proc.stderr


def test_the_librarys_warnings_reach_python_logging(tmp_path, monkeypatch, caplog):
    """A warning of the C++ library (here: the node daemon missing) is a record of the `stoker`
    logger, where an application configures, filters or redirects it, not a line on stderr."""
    src, dst = tmp_path / "src", tmp_path / "ds"
    make_tree(src, seed=6, classes=2, files_per_class=10, max_size=3000)
    stoker.pack(str(src), str(dst), chunk_size=8 << 10)
    monkeypatch.setenv("STOKER_NODE", str(tmp_path / "away.sock"))
    caplog.set_level(logging.WARNING, logger="stoker")
    assert sum(1 for _ in stoker.Loader(str(dst), shuffle="chunk", seed=1)) == 20

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "stoker" and "away.sock" in r.getMessage()]
    deadline = time.monotonic() + 10  # the log thread takes queued lines every 0.2 s
    while not said() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(said()) == 1, [r.getMessage() for r in caplog.records]
    record = said()[0]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("stoker: warning: STOKER_NODE=")
    assert "reading from the store instead" in record.getMessage()
