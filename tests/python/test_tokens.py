"""stoker.TokenLoader (issue 16 item 4): blocks of seq_len + 1 consecutive tokens from a
tokens column, every token once per epoch, chunk-wise shuffled, equal ranks, exact resume."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import stoker


def write_docs(path: Path, docs: list[np.ndarray], columns: dict | None = None,
               extra=lambda i: {}, **kwargs) -> None:
    columns = columns or {"tokens": "tokens:uint16"}
    with stoker.Writer(path, columns=columns, progress=False, **kwargs) as w:
        for i, doc in enumerate(docs):
            w.write({"tokens": doc, **extra(i)})


def id_docs(n: int, seed: int = 0) -> list[np.ndarray]:
    """Document i is i+1 repeated (its length random): runs in the stream show where each
    document went."""
    rng = np.random.default_rng(seed)
    return [np.full(int(rng.integers(1, 400)), i + 1, dtype=np.uint16) for i in range(n)]


def stream_of(path, column="tokens", **kwargs) -> np.ndarray:
    """The whole stream, rebuilt from a sequential pass with block_size 1 (blocks [t_k, t_k+1])."""
    blocks = np.concatenate(list(stoker.TokenLoader(path, column=column, seq_len=1,
                                                    batch_size=4096, shuffle="sequential",
                                                    **kwargs)))
    return np.concatenate([blocks[:, 0], blocks[-1:, 1]])


def check_documents_whole(stream: np.ndarray, docs: list[np.ndarray]) -> None:
    """Every document appears once, contiguous, complete."""
    edges = np.flatnonzero(np.diff(stream.astype(np.int64))) + 1
    runs = np.split(stream, edges)
    assert sorted(int(r[0]) for r in runs) == [i + 1 for i in range(len(docs))]
    for r in runs:
        assert len(r) == len(docs[int(r[0]) - 1])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokens") / "c.stoker"
    docs = id_docs(3000)
    write_docs(path, docs, chunk_size="64KiB")
    return path, docs


def test_the_stream_holds_every_document_whole(corpus):
    path, docs = corpus
    stream = stream_of(path)
    assert len(stream) == sum(len(d) for d in docs)
    check_documents_whole(stream, docs)
    assert stoker.Dataset(path).num_chunks > 10


@pytest.mark.parametrize("block", [1, 37, 2048, 40000])  # 40000: across several chunks
def test_every_token_once_per_epoch_in_blocks_that_cross_documents(corpus, block):
    path, docs = corpus
    stream = stream_of(path)
    loader = stoker.TokenLoader(path, seq_len=block, batch_size=16, seed=5)
    blocks = np.concatenate(list(loader))
    n = (len(stream) - 1) // block
    assert blocks.shape == (n, block + 1) and blocks.dtype == np.uint16
    assert loader.num_blocks == n and len(loader) == -(-n // 16)
    want = np.stack([stream[k * block:k * block + block + 1] for k in range(n)])
    # The same blocks, in another order (chunk-wise shuffled).
    assert sorted(map(bytes, blocks)) == sorted(map(bytes, want))
    if n > 100:
        assert not np.array_equal(blocks, want)


def test_order_is_deterministic_and_epochs_differ(corpus):
    path, _ = corpus
    a = np.concatenate(list(stoker.TokenLoader(path, seq_len=64, seed=1)))
    b = np.concatenate(list(stoker.TokenLoader(path, seq_len=64, seed=1)))
    np.testing.assert_array_equal(a, b)
    loader = stoker.TokenLoader(path, seq_len=64, seed=1)
    loader.set_epoch(1)
    c = np.concatenate(list(loader))
    assert not np.array_equal(a, c) and sorted(map(bytes, a)) == sorted(map(bytes, c))


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_get_equal_disjoint_shares(corpus, world):
    path, _ = corpus
    everything = np.concatenate(list(stoker.TokenLoader(path, seq_len=50, seed=2)))
    shares = [np.stack(list(stoker.TokenLoader(path, seq_len=50, seed=2, rank=r,
                                               world_size=world, drop_last=True,
                                               batch_size=None)))
              for r in range(world)]
    assert len({len(s) for s in shares}) == 1
    got = sorted(map(bytes, np.concatenate(shares)))
    assert len(got) == len(everything) - len(everything) % world
    assert set(got) <= set(map(bytes, everything))


def test_resume_is_exact_with_another_world_size(corpus):
    path, _ = corpus
    loader = stoker.TokenLoader(path, seq_len=40, batch_size=8, seed=3, rank=0, world_size=2)
    it = iter(loader)
    seen = [next(it) for _ in range(20)]
    state = loader.state_dict()
    # Rank 1 read the same number of batches: its blocks are the other half of the positions.
    other = stoker.TokenLoader(path, seq_len=40, batch_size=8, seed=3, rank=1, world_size=2)
    it1 = iter(other)
    seen += [next(it1) for _ in range(20)]
    rest = []
    for r in range(3):
        resumed = stoker.TokenLoader(path, seq_len=40, batch_size=8, seed=3, rank=r,
                                     world_size=3)
        resumed.load_state_dict(state)
        rest += list(resumed)
    whole = np.concatenate(list(stoker.TokenLoader(path, seq_len=40, batch_size=8, seed=3)))
    got = np.concatenate(seen + rest)
    assert sorted(map(bytes, got)) == sorted(map(bytes, whole))
    with pytest.raises(ValueError, match="seq_len"):
        stoker.TokenLoader(path, seq_len=41).load_state_dict(state)


def test_a_view_streams_its_documents_alone(corpus):
    path, docs = corpus
    ds = stoker.Dataset(path)
    # Documents whose id is odd (the filter sees each document's tokens).
    view = ds.filter({"tokens": lambda t: int(t[0]) % 2 == 1})
    assert 0 < len(view) < len(ds)
    stream = stream_of(view)
    kept = [d for d in docs if int(d[0]) % 2 == 1]
    assert len(stream) == sum(len(d) for d in kept)
    runs = np.split(stream, np.flatnonzero(np.diff(stream.astype(np.int64))) + 1)
    assert sorted(int(r[0]) for r in runs) == sorted(int(d[0]) for d in kept)
    # Chunk-wise shuffled blocks, every token once, equal ranks, resume refused for another view.
    whole = np.concatenate(list(stoker.TokenLoader(view, seq_len=30, batch_size=8, seed=1)))
    assert len(whole) == (len(stream) - 1) // 30
    assert sorted(map(bytes, whole)) == sorted(
        bytes(stream[k * 30:k * 30 + 31]) for k in range(len(whole)))
    ranks = [list(stoker.TokenLoader(view, seq_len=30, batch_size=8, seed=1, rank=r,
                                     world_size=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    state = stoker.TokenLoader(view, seq_len=30, seed=1).state_dict()
    other = ds.subset(range(1, len(ds), 2))  # the even documents
    with pytest.raises(ValueError, match="view"):
        stoker.TokenLoader(other, seq_len=30, seed=1).load_state_dict(state)


def test_other_columns_optional_ones_and_dtype(tmp_path):
    # Tokens among other columns, an optional one sorted before them (found by name then),
    # int32 tokens, and a cast for torch.
    docs = id_docs(500, seed=1)
    path = tmp_path / "mixed.stoker"
    write_docs(path, docs, columns={"a": "str?", "tokens": "tokens", "z": "int"},
               extra=lambda i: {"a": "x" * (i % 50) if i % 3 else None, "z": i},
               chunk_size="64KiB")
    stream = stream_of(path)
    assert stream.dtype == np.int32
    check_documents_whole(stream, docs)
    batch = next(iter(stoker.TokenLoader(path, seq_len=16, batch_size=4, dtype="int64")))
    assert batch.dtype == np.int64 and batch.shape == (4, 17)
    # A seq_len longer than the corpus: no block, said at once (a loop would run no step).
    with pytest.warns(UserWarning, match="has no block of seq_len=1000000"):
        assert len(stoker.TokenLoader(path, seq_len=1_000_000)) == 0
    # A narrower dtype than the tokens need would wrap ids into other tokens: refused.
    if max(int(d.max()) for d in docs if len(d)) > 127:
        with pytest.raises(OverflowError, match="does not fit dtype=int8"):
            list(stoker.TokenLoader(path, seq_len=16, batch_size=4, dtype="int8"))


def test_samples_split_across_chunks_keep_their_tokens(tmp_path):
    # Big documents in small chunks: a sample's token file often lands in the chunk after its
    # first file.
    rng = np.random.default_rng(4)
    docs = [np.full(int(rng.integers(2000, 9000)), i + 1, dtype=np.uint16) for i in range(200)]
    path = tmp_path / "split.stoker"
    write_docs(path, docs, columns={"a": "bytes", "tokens": "tokens:uint16"},
               extra=lambda i: {"a": bytes(3000)}, chunk_size="64KiB")
    check_documents_whole(stream_of(path), docs)


def test_errors(corpus, tmp_path):
    path, _ = corpus
    with pytest.raises(ValueError, match="'text' is not a tokens column.*tokens"):
        stoker.TokenLoader(path, column="text")
    with pytest.raises(ValueError, match="shuffle must be"):
        stoker.TokenLoader(path, shuffle="full")
    with pytest.raises(ValueError, match="seq_len"):
        stoker.TokenLoader(path, seq_len=0)
    # A flipped byte in a chunk is caught by its file's CRC.
    bad = tmp_path / "bad.stoker"
    write_docs(bad, [np.arange(100, dtype=np.uint16) + 7000])
    chunk = next((bad / "chunks").iterdir())
    data = bytearray(chunk.read_bytes())
    at = data.find((7050).to_bytes(2, "little"))
    data[at] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(stoker.CorruptionError, match=r"\.tokens: CRC32C mismatch"):
        list(stoker.TokenLoader(bad, seq_len=10))


def test_empty_and_tiny_streams(tmp_path):
    path = tmp_path / "tiny.stoker"
    write_docs(path, [np.array([5], dtype=np.uint16), np.array([], dtype=np.uint16)])
    loader = stoker.TokenLoader(path, seq_len=4)
    assert loader.num_tokens == 1 and loader.num_blocks == 0 and list(loader) == []


def test_an_ndarray_column_is_refused_with_what_to_write(tmp_path):
    # What stoker.optimize infers from NumPy token arrays (issue 37 item 9d): .npy files, each
    # with a header, which the token stream (raw tokens back to back) cannot read.
    path = tmp_path / "npy.stoker"
    docs = [np.arange(i + 1, dtype=np.uint16) for i in range(5)]
    stoker.optimize(lambda i: {"tokens": docs[i]}, range(5), path, num_workers=1,
                    progress=False)
    assert stoker.Dataset(path).columns == {"tokens": "ndarray:uint16"}
    want = (f"'tokens' is an 'ndarray:uint16' column of {path}, and TokenLoader reads a tokens "
            "column: write it with columns={'tokens': 'tokens:uint16'} in stoker.Writer or "
            "stoker.optimize (each value a 1-D integer array or list)")
    with pytest.raises(ValueError) as e:
        stoker.TokenLoader(path, seq_len=2)
    assert str(e.value) == want
    with pytest.raises(ValueError, match=r"write it with columns=\{'tokens': 'tokens:uint16'\}"):
        stoker.TokenLoader(stoker.Mix([path]), seq_len=2)
    fixed = tmp_path / "tokens.stoker"  # written as the message says, it reads
    stoker.optimize(lambda i: {"tokens": docs[i]}, range(5), fixed, num_workers=1,
                    progress=False, columns={"tokens": "tokens:uint16"})
    assert stoker.TokenLoader(fixed, seq_len=2).num_tokens == 15


def test_block_size_is_now_seq_len_with_a_deprecation_warning(corpus):
    """TokenLoader's tokens per block were called block_size, which stoker.Loader uses for its
    shuffle unit in bytes: the old keyword, the old positional form (source, column,
    block_size, batch_size) and a state saved under the old key still work, with a warning."""
    path, _ = corpus
    new = stoker.TokenLoader(path, 4, seq_len=32, seed=1)
    with pytest.deprecated_call(match=r"block_size=\.\.\.\) is deprecated: call it seq_len="):
        old = stoker.TokenLoader(path, block_size=32, batch_size=4, seed=1)
    with pytest.deprecated_call(match="TokenLoader\\(source, column, block_size, batch_size\\)"):
        positional = stoker.TokenLoader(path, "tokens", 32, 4, seed=1)
    want = [b.tolist() for b in stoker.TokenLoader(path, 4, seq_len=32, seed=1)]
    for loader in (old, positional):
        assert loader.seq_len == 32 and loader.batch_size == 4
        assert [b.tolist() for b in loader] == want
    with pytest.raises(TypeError, match="both block_size="):
        stoker.TokenLoader(path, block_size=32, seq_len=32)
    # A state saved before the rename names the tokens per block block_size.
    it = iter(new)
    next(it)
    saved = new.state_dict()
    old_state = {("block_size" if k == "seq_len" else k): v for k, v in saved.items()}
    resumed = stoker.TokenLoader(path, 4, seq_len=32, seed=1)
    resumed.load_state_dict(old_state)
    assert [b.tolist() for b in resumed] == [b.tolist() for b in it]
    with pytest.raises(ValueError, match="seq_len"):
        stoker.TokenLoader(path, 4, seq_len=16, seed=1).load_state_dict(old_state)
