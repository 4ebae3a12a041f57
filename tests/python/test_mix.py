"""stoker.Mix (issue 16 item 5): datasets mixed by weight, deterministic, each source's share of
every epoch within one sample of its weight, sources that run out restart with a new
permutation, exact resume, equal ranks, every sample tagged with its source."""
from __future__ import annotations

import io
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


# -- TokenLoader over a Mix: blocks mixed by weight ---------------------------------------------

def token_source(path, n_docs: int, base: int, seed: int):
    """Documents of consecutive tokens from base on (uint16): every block's tokens are its
    own."""
    rng = np.random.default_rng(seed)
    at = base
    with stoker.Writer(path, columns={"tokens": "tokens:uint16"}, progress=False,
                       chunk_size="16KiB") as w:
        for _ in range(n_docs):
            n = int(rng.integers(1, 120))
            w.write({"tokens": np.arange(at, at + n, dtype=np.uint16)})
            at += n
    assert at < 65536
    return stoker.Dataset(path)


@pytest.fixture(scope="module")
def token_sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokmix")
    return token_source(d / "a.stoker", 400, 0, 1), token_source(d / "b.stoker", 60, 40000, 2)


def all_blocks(ds, block: int) -> list[tuple]:
    return [tuple(b) for b in np.concatenate(list(stoker.TokenLoader(
        ds, seq_len=block, batch_size=64, shuffle="sequential"))).tolist()]


def token_items(loader) -> list[tuple[int, tuple]]:
    return [(int(s), tuple(row)) for batch, sources in loader
            for row, s in zip(batch.tolist(), sources.tolist())]


def test_token_mix_shares_blocks_and_restarts(token_sources):
    a, b = token_sources
    block = 16
    blocks = [all_blocks(a, block), all_blocks(b, block)]
    loader = stoker.TokenLoader(stoker.Mix([a, b], weights=[0.5, 0.5]), seq_len=block,
                                batch_size=5, seed=4)
    # The weights count blocks: an epoch is all blocks of both, half from each.
    assert loader.num_blocks == len(blocks[0]) + len(blocks[1])
    assert abs(loader.counts[0] - loader.counts[1]) <= 1
    seen: dict[int, list[tuple]] = {0: [], 1: []}
    for _ in range(2):
        got = token_items(loader)
        assert np.bincount([s for s, _ in got], minlength=2).tolist() == loader.counts
        for s, row in got:
            seen[s].append(row)
    for s in (0, 1):
        assert set(seen[s]) <= set(blocks[s])  # every row is a block of its source's stream
    # b is short: it is read whole, then again in a new order.
    n = len(blocks[1])
    assert len(seen[1]) > 2 * n
    assert sorted(seen[1][:n]) == sorted(blocks[1]) == sorted(seen[1][n:2 * n])
    assert seen[1][:n] != seen[1][n:2 * n]
    assert len(set(seen[0][:len(blocks[0])])) == len(seen[0][:len(blocks[0])])
    # Deterministic; single blocks come with their source.
    again = stoker.TokenLoader(stoker.Mix([a, b], weights=[0.5, 0.5]), seq_len=block,
                               batch_size=None, seed=4)
    singles = [(s, tuple(row.tolist())) for row, s in again]
    assert singles == token_items(stoker.TokenLoader(
        stoker.Mix([a, b], weights=[0.5, 0.5]), seq_len=block, batch_size=5, seed=4))


@pytest.mark.parametrize("world", [2, 3])
def test_token_mix_ranks_and_resume(token_sources, world):
    mix = stoker.Mix(list(token_sources), weights=[0.7, 0.3])
    kw = dict(seq_len=8, batch_size=4, seed=2)
    whole = sorted(token_items(stoker.TokenLoader(mix, **kw)))
    ranks = [token_items(stoker.TokenLoader(mix, rank=r, world_size=world, **kw))
             for r in range(world)]
    assert len({len(r) for r in ranks}) == 1
    if len(whole) % world == 0:
        assert sorted(sum(ranks, [])) == whole
    loaders = [stoker.TokenLoader(mix, rank=r, world_size=world, **kw) for r in range(world)]
    its = [iter(l) for l in loaders]
    first = []
    for it in its:
        for _ in range(3):
            batch, sources = next(it)
            first += [(int(s), tuple(row)) for row, s in zip(batch.tolist(), sources.tolist())]
    state = loaders[0].state_dict()
    rest = []
    for r in range(2):
        resumed = stoker.TokenLoader(mix, rank=r, world_size=2, **kw)
        resumed.load_state_dict(state)
        rest += token_items(resumed)
    got = sorted(first + rest)
    # Padding may repeat a few blocks at the epoch's end; nothing is lost.
    assert set(got) == set(whole) and len(got) - len(whole) < 2 * world
    with pytest.raises(ValueError, match="order would differ"):
        stoker.TokenLoader(mix, seq_len=9, batch_size=4, seed=2).load_state_dict(state)


def test_token_mix_refuses_different_types(token_sources, tmp_path):
    a, _ = token_sources
    with stoker.Writer(tmp_path / "w.stoker", columns={"tokens": "tokens:uint32"},
                       progress=False) as w:
        w.write({"tokens": np.arange(100, dtype=np.uint32)})
    with pytest.raises(ValueError, match="different types"):
        stoker.TokenLoader(stoker.Mix([a, tmp_path / "w.stoker"]), seq_len=8)


# -- ImageLoader over a Mix ----------------------------------------------------------------------

def image_source(path, n: int, label: int, shade: int, column: str = "image"):
    """n JPEGs of one flat shade and one label: the pixels say the source too."""
    from PIL import Image
    with stoker.Writer(path, columns={column: "jpeg", "label": "int"}, progress=False,
                       label="label", chunk_size="16KiB") as w:
        for _ in range(n):
            buf = io.BytesIO()
            Image.new("RGB", (40, 30), (shade, shade, shade)).save(buf, "JPEG")
            w.write({column: buf.getvalue(), "label": label})
    return stoker.Dataset(path)


def test_image_mix(tmp_path):
    pytest.importorskip("torch")
    a = image_source(tmp_path / "a.stoker", 60, 0, 30)
    b = image_source(tmp_path / "b.stoker", 15, 1, 220)
    mix = stoker.Mix([a, b], weights=[2, 1], epoch_size=48)
    kw = dict(batch_size=8, size=16, train=True, dtype="uint8", seed=1)
    loader = stoker.ImageLoader(mix, **kw)
    assert len(loader) == 6
    got = []
    for images, labels, sources in loader:
        assert labels.tolist() == sources.tolist()  # each source keeps its labels
        # Source b's images are light, a's dark: the decoded pixels came from the right source.
        shade = images.float().mean(dim=(1, 2, 3))
        assert ((shade > 128).long() == sources).all()
        got += sources.tolist()
    assert np.bincount(got).tolist() == [32, 16]
    # Ranks equal, resumable with another world size, deterministic.
    state = None
    firsts = []
    for r in range(3):
        l = stoker.ImageLoader(mix, rank=r, world_size=3, **kw)
        _, labels, _ = next(iter(l))
        firsts += labels.tolist()
        state = l.state_dict()
    rest = []
    for r in range(2):
        l = stoker.ImageLoader(mix, rank=r, world_size=2, **kw)
        l.load_state_dict(state)
        rest += [s for _, _, sources in l for s in sources.tolist()]
    assert np.bincount(firsts + rest).tolist() == [32, 16]
    out = next(iter(stoker.ImageLoader(mix, batch_transform=lambda x, y: y * 10, **kw)))
    assert (out[0] == out[1] * 10).all()
    # One pipeline decodes one member name: sources that name their image column differently
    # are refused when the loader is made.
    c = image_source(tmp_path / "c.stoker", 4, 2, 128, column="photo")
    with pytest.raises(ValueError, match="different columns"):
        stoker.ImageLoader(stoker.Mix([a, c]), **kw)


def test_views_are_sources_too(sources, token_sources):
    a, b, _ = sources
    odd = a.filter({"i": lambda i: i % 2 == 1})
    got = items(stoker.Loader(stoker.Mix([odd, b.subset(range(10))], weights=[1, 1],
                                         epoch_size=40), seed=1))
    assert sorted(i for s, i in got if s == 0) == sorted(set(i for s, i in got if s == 0))
    assert all(i % 2 == 1 for s, i in got if s == 0)
    assert sorted(i for s, i in got if s == 1) == sorted(list(range(10)) * 2)
    ta, tb = token_sources
    few = tb.subset(range(5))  # its first five documents' tokens, nothing else
    allowed = set(np.concatenate([tb[i]["tokens"] for i in range(5)]).tolist())
    loader = stoker.TokenLoader(stoker.Mix([ta, few]), seq_len=4, batch_size=8, seed=0)
    rows = [row for s, row in token_items(loader) if s == 1]
    assert rows and all(set(row) <= allowed for row in rows)


def test_a_views_repr_tells_it_from_its_base_and_other_views(sources):
    a, _, _ = sources
    evens, head = a.filter({"i": lambda i: i % 2 == 0}), a.subset(range(250))
    assert repr(evens) == (f"stoker.DatasetView({a!r}, 250 of 500 samples: "
                           "[0, 2, 4, ..., 494, 496, 498])")
    text = repr(stoker.Mix([a, evens, head]))
    assert text == (f"stoker.Mix({{{a.uri!r}: 0.5, {evens!r}: 0.25, {head!r}: 0.25}}, "
                    "epoch_size=1000)")
    with pytest.raises(ValueError, match=r"source stoker.DatasetView\(.*, 0 of 500 samples: "
                                         r"\[\]\) has no samples"):
        stoker.Mix([a, a.subset([])], weights=[1, 1])


def test_a_mix_is_a_source_like_a_dataset(sources):
    """A Mix goes wherever a dataset goes, stoker.torch's IterableDataset included: with
    DataLoader workers, every (sample, source) of the rank's share of the mix arrives once."""
    torch = pytest.importorskip("torch")
    import stoker.torch
    a, b, _ = sources
    mix = stoker.Mix([a, b], weights=[2, 1], epoch_size=120)
    want = sorted(items(stoker.Loader(mix, seed=5, rank=1, world_size=2)))
    ds = stoker.torch.StokerIterableDataset(mix, seed=5, rank=1, world_size=2)
    assert len(ds) == 60 and ds.block_size == [0, 0]
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = sorted((int(s), x["i"]) for x, s in loader)
    assert got == want
    assert type(stoker.Loader(mix)) is stoker.Loader  # one class, composed: no subclass per source
