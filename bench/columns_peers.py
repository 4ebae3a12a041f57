"""The peers' side of bench/run_columns.py, run in their own venv (bench/setup_peers.sh
streaming: mosaicml-streaming and litdata beside torch 2.13.0 CPU). One step per call; prints
one JSON line {"seconds": ..., ...}. Each step is what the library's documentation shows.

    python columns_peers.py mds-write SAMPLES.pkl OUT
    python columns_peers.py mds-read OUT
    python columns_peers.py litdata-write SAMPLES.pkl OUT
    python columns_peers.py litdata-read OUT
    python columns_peers.py litdata-tokens-write DOCS.npz OUT BLOCK
    python columns_peers.py litdata-tokens-read OUT BLOCK
"""
from __future__ import annotations

import json
import pickle
import sys
import time

import numpy as np


def samples(path: str) -> list[tuple[bytes, int, str]]:
    with open(path, "rb") as f:
        return pickle.load(f)


def mds_write(src: str, out: str) -> dict:
    from streaming import MDSWriter
    data = samples(src)
    t = time.perf_counter()
    with MDSWriter(out=out, columns={"image": "bytes", "label": "int", "caption": "str"},
                   size_limit="64mb") as w:
        for image, label, caption in data:
            w.write({"image": image, "label": label, "caption": caption})
    return {"seconds": time.perf_counter() - t, "samples": len(data)}


def mds_read(out: str) -> dict:
    from streaming import StreamingDataset
    for epoch in range(2):  # the second pass is timed, as for the others
        t = time.perf_counter()
        ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=1 + epoch, batch_size=1)
        n = nbytes = 0
        for s in ds:
            n += 1
            nbytes += len(s["image"]) + len(s["caption"])
        del ds
    return {"seconds": time.perf_counter() - t, "samples": n, "bytes": nbytes}


def _litdata_sample(item):
    image, label, caption = item
    return {"image": image, "label": label, "caption": caption}


def litdata_write(src: str, out: str) -> dict:
    import litdata
    data = samples(src)
    t = time.perf_counter()
    litdata.optimize(fn=_litdata_sample, inputs=data, output_dir=out, chunk_bytes="64MB",
                     num_workers=1, mode="overwrite")
    return {"seconds": time.perf_counter() - t, "samples": len(data)}


def litdata_read(out: str) -> dict:
    import litdata
    for _ in range(2):  # the second pass is timed, as for the others
        t = time.perf_counter()
        ds = litdata.StreamingDataset(input_dir=out, shuffle=True, seed=1)
        n = nbytes = 0
        for s in ds:
            n += 1
            nbytes += len(s["image"]) + len(s["caption"])
    return {"seconds": time.perf_counter() - t, "samples": n, "bytes": nbytes}


def _docs(path: str) -> list[np.ndarray]:
    z = np.load(path)
    tokens, ends = z["tokens"], z["ends"]
    return np.split(tokens, ends[:-1])


def _litdata_doc(doc):
    import torch
    yield torch.from_numpy(doc)


def litdata_tokens_write(src: str, out: str, block: str) -> dict:
    import litdata
    docs = _docs(src)
    t = time.perf_counter()
    litdata.optimize(fn=_litdata_doc, inputs=docs, output_dir=out,
                     chunk_size=(int(block) + 1) * 16000, num_workers=1,
                     item_loader=litdata.TokensLoader(), mode="overwrite")
    return {"seconds": time.perf_counter() - t, "docs": len(docs)}


def litdata_tokens_read(out: str, block: str) -> dict:
    import litdata
    for _ in range(2):  # the second pass is timed, as for the others
        t = time.perf_counter()
        ds = litdata.StreamingDataset(input_dir=out, shuffle=True, seed=1,
                                      item_loader=litdata.TokensLoader(block_size=int(block) + 1))
        n = tokens = 0
        for item in ds:
            n += 1
            tokens += int(item.shape[0]) - 1
    return {"seconds": time.perf_counter() - t, "blocks": n, "tokens": tokens}


STEPS = {"mds-write": mds_write, "mds-read": mds_read, "litdata-write": litdata_write,
         "litdata-read": litdata_read, "litdata-tokens-write": litdata_tokens_write,
         "litdata-tokens-read": litdata_tokens_read}

if __name__ == "__main__":
    print(json.dumps(STEPS[sys.argv[1]](*sys.argv[2:])))
