"""Typed samples from Python (issue 16): stoker.Writer / stoker.Loader against MosaicML
Streaming (MDSWriter / StreamingDataset) and LitData (optimize / StreamingDataset) on the same
image + caption samples, and stoker.TokenLoader against LitData's TokensLoader and a NumPy
memmap of the same tokens (the physical limit: random blocks copied out of the page cache).

    .venv/bin/python bench/run_columns.py [--images 5000] [--docs 40000] [--repeats 3]

Needs the peers' venv (bash bench/setup_peers.sh streaming). Every system reads from the page
cache (the data is written just before), one process, no DataLoader workers, two passes of
which the second is timed: this measures each library's own per-sample cost. Writes are to a fresh directory each time. Reported:
samples/s (tokens/s) per system, and stoker's ratio to the better peer in the same run.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

import stoker  # noqa: E402

PEERS = Path(os.environ.get("STOKER_BENCH_CACHE", "/var/tmp/stoker-bench")) / "venv-streaming"
HERE = Path(__file__).resolve().parent
WORDS = ("a photo of the small large red green dog cat tree house car street person "
         "mountain river boat bird flower field city night light old new").split()


def peer(step: str, *args) -> dict:
    out = subprocess.run([str(PEERS / "bin" / "python"), str(HERE / "columns_peers.py"), step,
                          *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{step} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def image_samples(tree: Path, seed: int) -> list[tuple[bytes, int, str]]:
    rng = np.random.default_rng(seed)
    classes = sorted(p.name for p in tree.iterdir() if p.is_dir())
    out = []
    for label, name in enumerate(classes):
        for f in sorted((tree / name).iterdir()):
            caption = " ".join(rng.choice(WORDS, size=int(rng.integers(6, 16))))
            out.append((f.read_bytes(), label, caption))
    return out


def token_docs(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(6.0, 1.0, size=n), 8, 20000).astype(np.int64)
    return [rng.integers(0, 50257, size=int(k), dtype=np.uint16) for k in lengths]


def stoker_write(samples, out: Path) -> dict:
    t = time.perf_counter()
    with stoker.Writer(out, columns={"image": "jpeg", "label": "int", "caption": "str"},
                       progress=False) as w:
        for image, label, caption in samples:
            w.write({"image": image, "label": label, "caption": caption})
    return {"seconds": time.perf_counter() - t, "samples": len(samples)}


def stoker_read(out: Path) -> dict:
    for _ in range(2):  # the second pass is timed, as for the peers
        t = time.perf_counter()
        n = nbytes = 0
        for s in stoker.Loader(out, shuffle="chunk", seed=1):
            n += 1
            nbytes += len(s["image"]) + len(s["caption"])
    return {"seconds": time.perf_counter() - t, "samples": n, "bytes": nbytes}


def stoker_tokens_write(docs, out: Path) -> dict:
    t = time.perf_counter()
    with stoker.Writer(out, columns={"tokens": "tokens:uint16"}, progress=False) as w:
        for d in docs:
            w.write({"tokens": d})
    return {"seconds": time.perf_counter() - t, "docs": len(docs)}


def stoker_tokens_read(out: Path, block: int, batch: int) -> dict:
    for _ in range(2):  # the second pass is timed, as for the others
        t = time.perf_counter()
        loader = stoker.TokenLoader(out, seq_len=block, batch_size=batch, seed=1)
        n = 0
        for b in loader:
            n += b.shape[0]
    return {"seconds": time.perf_counter() - t, "blocks": n, "tokens": n * block}


def memmap_read(path: Path, total: int, block: int, batch: int) -> dict:
    """Random blocks of block + 1 tokens copied out of a memmap, `batch` at a time: what a
    hand-written loader over one flat token file does (Megatron-style .bin)."""
    for _ in range(2):  # the second pass is timed, as for the others
        t = time.perf_counter()
        mm = np.memmap(path, dtype=np.uint16, mode="r")
        blocks = (total - 1) // block
        order = np.random.default_rng(1).permutation(blocks)
        n = 0
        for i in range(0, blocks, batch):
            ks = order[i:i + batch]
            out = np.empty((len(ks), block + 1), dtype=np.uint16)
            for j, k in enumerate(ks):
                out[j] = mm[k * block:k * block + block + 1]
            n += len(ks)
    return {"seconds": time.perf_counter() - t, "blocks": n, "tokens": n * block}


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--docs", type=int, default=40000)
    p.add_argument("--block", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.set_defaults(images=5000)
    a = p.parse_args()
    if not (PEERS / "bin" / "python").exists():
        sys.exit(f"no peers venv at {PEERS}: run bash bench/setup_peers.sh streaming")
    work = benchlib.CACHE / "columns"
    benchlib.rmtree(work)
    work.mkdir(parents=True)
    tree, summary = benchlib.sample_data(a.images, a.classes, a.seed)
    samples = image_samples(tree, a.seed)
    pkl = work / "samples.pkl"
    pkl.write_bytes(pickle.dumps(samples))
    docs = token_docs(a.docs, a.seed)
    tokens = np.concatenate(docs)
    np.savez(work / "docs.npz", tokens=tokens, ends=np.cumsum([len(d) for d in docs]))
    flat = work / "tokens.bin"
    tokens.tofile(flat)
    benchlib.log(benchlib.data_line(summary))
    benchlib.log(f"{len(docs)} token documents, {len(tokens):,} uint16 tokens")

    res: dict[str, list[dict]] = {}
    for r in range(a.repeats):
        for name, run in (
                ("stoker_write", lambda o: stoker_write(samples, o)),
                ("mds_write", lambda o: peer("mds-write", pkl, o)),
                ("litdata_write", lambda o: peer("litdata-write", pkl, o))):
            out = work / f"{name}-{r}"
            res.setdefault(name, []).append(run(out))
            res.setdefault(name.replace("write", "read"), []).append(
                {"stoker_write": lambda: stoker_read(out),
                 "mds_write": lambda: peer("mds-read", out),
                 "litdata_write": lambda: peer("litdata-read", out)}[name]())
            benchlib.rmtree(out)
        tout, lout = work / f"stoker-tokens-{r}", work / f"litdata-tokens-{r}"
        res.setdefault("stoker_tokens_write", []).append(stoker_tokens_write(docs, tout))
        res.setdefault("litdata_tokens_write", []).append(
            peer("litdata-tokens-write", work / "docs.npz", lout, a.block))
        res.setdefault("memmap_tokens_read", []).append(
            memmap_read(flat, len(tokens), a.block, a.batch))
        res.setdefault("stoker_tokens_read", []).append(
            stoker_tokens_read(tout, a.block, a.batch))
        res.setdefault("litdata_tokens_read", []).append(
            peer("litdata-tokens-read", lout, a.block))
        benchlib.rmtree(tout)
        benchlib.rmtree(lout)
        benchlib.log(f"repeat {r + 1}/{a.repeats} done")

    rate = {k: (best(v).get("samples") or best(v).get("tokens") or best(v).get("docs"))
            / best(v)["seconds"] for k, v in res.items()}
    ratios = {
        "write_vs_better_peer": rate["stoker_write"] / max(rate["mds_write"],
                                                           rate["litdata_write"]),
        "read_vs_better_peer": rate["stoker_read"] / max(rate["mds_read"], rate["litdata_read"]),
        "tokens_write_vs_litdata": rate["stoker_tokens_write"] / rate["litdata_tokens_write"],
        "tokens_read_vs_litdata": rate["stoker_tokens_read"] / rate["litdata_tokens_read"],
        "tokens_read_vs_memmap": rate["stoker_tokens_read"] / rate["memmap_tokens_read"],
    }
    for k, v in sorted(rate.items()):
        benchlib.log(f"{k:24s} {v:14,.0f} /s (best of {a.repeats})")
    for k, v in ratios.items():
        benchlib.log(f"{k:24s} {v:.2f}x")
    benchlib.save("columns", {"data": summary, "docs": len(docs), "tokens": int(len(tokens)),
                              "block": a.block, "batch": a.batch, "runs": res, "rates": rate,
                              "ratios": ratios, "machine": benchlib.machine(),
                              "argv": sys.argv})


if __name__ == "__main__":
    main()
