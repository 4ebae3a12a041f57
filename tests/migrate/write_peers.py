"""Writes MDS and LitData datasets with the real packages, for tests/python/test_migrate.py:
mosaicml-streaming's MDSWriter and litdata's optimize / BinaryWriter, covering their encodings,
serializers and compressions. Beside them, expected.pkl: {dataset: [each sample as stoker
should read it back: bytes, int, float, str, JSON values, NumPy arrays]}, made from the values
as written (a PIL image as np.asarray(image), an encoded one as the bytes the writer stored).

    .venv-torchvision/bin/python tests/migrate/write_peers.py OUT_DIR

Runs in the venv that has torch, torchvision, mosaicml-streaming and litdata (scripts/test's
torchvision stage): PyPI's torchvision does not load beside .venv's pinned torch.
"""
from __future__ import annotations

import decimal
import io
import os
import pickle
import sys

import numpy as np
from PIL import Image

OUT = sys.argv[1]
EXPECTED: dict[str, list[dict]] = {}


def picture(i: int, size: tuple[int, int] = (16, 12)) -> Image.Image:
    """A small RGB image that differs by sample (gradients, so JPEG has something to do)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    pixels = np.stack([(x * 13 + i * 7) % 256, (y * 17 + i * 3) % 256, (x * y + i) % 256], -1)
    return Image.fromarray(pixels.astype(np.uint8))


def jpeg_file(i: int) -> str:
    path = os.path.join(OUT, "files", f"photo{i}.jpg")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    picture(i, (20, 14)).save(path, "JPEG", quality=90)
    return path


def jpeg_bytes(i: int) -> bytes:
    out = io.BytesIO()
    picture(i, (24, 16)).save(out, "JPEG", quality=80)
    return out.getvalue()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- MDS (mosaicml-streaming) ----

MDS_ALL = {"image": "jpeg", "png": "png", "pil": "pil", "gray": "pil", "label": "int",
           "i8": "int8", "i32": "int32", "u16": "uint16", "u64": "uint64", "f16": "float16",
           "f32": "float32", "f64": "float64", "caption": "str", "si": "str_int",
           "sf": "str_float", "sd": "str_decimal", "meta": "json", "emb": "ndarray:float32:4",
           "arr": "ndarray", "arr16": "ndarray:int16", "raw": "bytes"}


def mds_all_sample(i: int) -> tuple[dict, dict]:
    from streaming.base.format.mds.encodings import mds_encode
    photo = Image.open(jpeg_file(i))  # a JpegImageFile with a filename: MDS copies the file
    png = picture(i + 100)
    gray = picture(i, (9 + i % 3, 7)).convert("L")
    rgb = picture(i, (10, 6 + i % 4))
    arr = (np.arange(6, dtype=np.float64).reshape(2, 3) * i if i % 2 else
           np.full((3,), i, np.uint8))
    sample = {"image": photo, "png": png, "pil": rgb, "gray": gray, "label": i % 7,
              "i8": -i, "i32": i * 100_000, "u16": 65_000 - i, "u64": 2**62 + i,
              "f16": i / 4, "f32": i / 3, "f64": float("nan") if i == 5 else i / 7,
              "caption": f"ein Bild Nr. {i} ✓", "si": -i * 3, "sf": i + 0.25,
              "sd": decimal.Decimal(f"{i}.10"), "meta": {"i": i, "tags": ["a", str(i)]},
              "emb": np.arange(4, dtype=np.float32) + i,
              "arr": arr, "arr16": np.arange(i + 1, dtype=np.int16), "raw": bytes([i]) * i}
    expected = {"image": read(photo.filename), "png": mds_encode("png", png),
                "pil": np.asarray(rgb), "gray": np.asarray(gray), "label": i % 7,
                "i8": -i, "i32": i * 100_000, "u16": 65_000 - i, "u64": 2**62 + i,
                "f16": float(np.float16(i / 4)), "f32": float(np.float32(i / 3)),
                "f64": sample["f64"], "caption": sample["caption"], "si": -i * 3,
                "sf": i + 0.25, "sd": f"{i}.10", "meta": sample["meta"], "emb": sample["emb"],
                "arr": arr, "arr16": sample["arr16"], "raw": sample["raw"]}
    return sample, expected


def mds(name: str, columns: dict, samples, **options) -> None:
    from streaming import MDSWriter
    EXPECTED[name] = []
    with MDSWriter(out=os.path.join(OUT, name), columns=columns, **options) as w:
        for sample, expected in samples:
            w.write(sample)
            EXPECTED[name].append(expected)


def write_mds() -> None:
    mds("mds_all", MDS_ALL, (mds_all_sample(i) for i in range(12)), size_limit=1 << 13)
    # The usual ETL output: encoded JPEGs in a bytes column, zstd shards with hashes.
    typical = {"image": "bytes", "label": "int", "caption": "str", "emb": "ndarray:float32:4"}
    mds("mds_zstd", typical,
        (({"image": jpeg_bytes(i), "label": i % 3, "caption": f"caption {i}",
           "emb": np.full(4, i, np.float32)},) * 2 for i in range(40)),
        compression="zstd", hashes=["sha1", "xxh64"], size_limit=1 << 12)
    small = {"n": "int", "s": "str", "a": "ndarray:uint8"}
    for codec in ("gz", "bz2", "br", "snappy", "zstd:7"):
        mds(f"mds_{codec.replace(':', '_')}", small,
            (({"n": i, "s": "x" * i, "a": np.arange(i + 1, dtype=np.uint8)},) * 2
             for i in range(6)), compression=codec, hashes=["md5"], size_limit=1 << 8)
    from streaming.base.format.mds.encodings import mds_encode
    obj = [{"a": [i, i + 1], "b": "x" * i} for i in range(3)]
    mds("mds_pkl", {"obj": "pkl", "n": "int"},
        (({"obj": o, "n": i}, {"obj": o, "n": i, "obj_bytes": mds_encode("pkl", o)})
         for i, o in enumerate(obj)))


# ---- LitData ----

def media_sample(i: int) -> dict:
    import torch
    return {"image": Image.open(jpeg_file(i)), "pil": picture(i, (11, 5 + i % 3)),
            "label": i % 4, "score": i / 8, "caption": f"caption {i}", "flag": i % 2 == 0,
            "emb": np.arange(3, dtype=np.float32) * i, "mat": np.eye(2) * i,
            "t": torch.arange(6, dtype=torch.float32).reshape(2, 3) + i,
            "ids": torch.arange(i + 1, dtype=torch.int64), "tags": ["x", str(i)],
            "raw": bytes([i, 255]) * (i + 1)}


def media_expected(i: int) -> dict:
    s = media_sample(i)
    return {**s, "image": read(s["image"].filename), "pil": np.asarray(s["pil"]),
            "t": s["t"].numpy(), "ids": s["ids"].numpy()}


def row_sample(i: int) -> dict:
    """Plain values only: with pyarrow there, litdata keeps such rows as an Arrow footer."""
    sample = {"text": f"row {i}", "label": i % 3, "image": jpeg_bytes(i), "score": i * 1.5,
              "meta": {"a": i, "tags": ["t"] * (i % 3)}}
    if i % 5 == 3:
        del sample["score"]  # an optional field: missing from some samples
    return sample


def row_expected(i: int, *, footer: bool) -> dict:
    s = row_sample(i)
    # litdata's reader gives a missing field as None from a footer, as its default (0.0) from
    # items (the writer fills it in); stoker reads what litdata would.
    return {"text": s["text"], "label": s["label"], "image": s["image"],
            "score": s.get("score", None if footer else 0.0), "meta_a": s["meta"]["a"],
            "meta_tags": s["meta"]["tags"]}


def nested_sample(i: int) -> dict:
    """JSON leaves of every compact kind litdata has (strs, ints, floats, bools, records,
    dicts, mixed lists as JSON text) beside a PIL image, which keeps them in the items."""
    return {"pic": picture(i), "strs": ["a", "b" * i], "ints": [i, -i, 2**40],
            "floats": [0.5, i / 3], "bools": [True, i % 2 == 1],
            "recs": [{"k": "x", "v": i, "w": 0.5, "ok": True, "n": None}],
            "mix": [1, "a", None, {"z": [i]}], "empty": []}


def nested_expected(i: int) -> dict:
    s = nested_sample(i)
    return {**s, "pic": np.asarray(s["pic"])}


def binary_writer(name: str, samples: list, expected: list, **options) -> None:
    from litdata.streaming.writer import BinaryWriter
    path = os.path.join(OUT, name)
    os.makedirs(path)
    w = BinaryWriter(path, **options)
    for i, s in enumerate(samples):
        w[i] = s
    w.done()
    w.merge(1)
    EXPECTED[name] = expected


def optimized(name: str, fn, n: int, expected: list, **options) -> None:
    import litdata
    litdata.optimize(fn=fn, inputs=list(range(n)), output_dir=os.path.join(OUT, name),
                     num_workers=1, mode="overwrite", **options)
    EXPECTED[name] = expected


def token_doc(i: int):
    import torch
    yield torch.arange(i * 10, i * 10 + 5 + (i * 7) % 23, dtype=torch.int32)


def write_litdata() -> None:
    import litdata
    import litdata.streaming.item_loader as item_loader
    n = 10
    media = [media_expected(i) for i in range(n)]
    optimized("lit_media", media_sample, n, media, chunk_bytes=4000)
    optimized("lit_media_zstd", media_sample, n, media, chunk_bytes=4000, compression="zstd",
              compression_batch_size=3)  # "batch": frames of 3 items
    optimized("lit_media_chunk", media_sample, n, media, chunk_bytes=4000,
              compression="zstd:7", compression_level="chunk")
    optimized("lit_media_sample", media_sample, n, media, chunk_bytes=4000,
              compression="zstd", compression_level="sample")
    rows = [row_expected(i, footer=True) for i in range(n)]
    optimized("lit_rows", row_sample, n, rows, chunk_size=4)
    optimized("lit_rows_zstd", row_sample, n, rows, chunk_size=4, compression="zstd")
    item_loader._PYARROW_AVAILABLE = False  # as a writer without pyarrow (or litdata < 0.2.60)
    binary_writer("lit_rows_items", [row_sample(i) for i in range(n)],
                  [row_expected(i, footer=False) for i in range(n)], chunk_size=4)
    item_loader._PYARROW_AVAILABLE = True
    binary_writer("lit_nested", [nested_sample(i) for i in range(6)],
                  [nested_expected(i) for i in range(6)], chunk_size=4)
    tuples = [(np.arange(i, dtype=np.int16), i / 2, i % 2 == 1, f"s{i}") for i in range(7)]
    binary_writer("lit_tuple", tuples, [dict(zip("0123", t, strict=True)) for t in tuples],
                  chunk_size=3)
    binary_writer("lit_leaf", [f"leaf {i}" for i in range(5)],
                  [{"data": f"leaf {i}"} for i in range(5)], chunk_size=2)
    docs = [next(token_doc(i)).numpy() for i in range(30)]
    optimized("lit_tokens", token_doc, 30, [{"tokens": d} for d in docs], chunk_size=200,
              item_loader=litdata.TokensLoader())
    docs16 = [np.arange(i, 3 * i + 1, dtype=np.uint16) for i in range(12)]
    binary_writer("lit_tokens16", docs16, [{"tokens": d} for d in docs16], chunk_size=50,
                  item_loader=litdata.TokensLoader(), compression="zstd",
                  compression_level="chunk")
    binary_writer("lit_pickle", [{"obj": complex(i, 1), "n": i} for i in range(3)],
                  [{"obj_bytes": pickle.dumps(complex(i, 1)), "n": i} for i in range(3)],
                  chunk_size=2)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    write_mds()
    write_litdata()
    with open(os.path.join(OUT, "expected.pkl"), "wb") as f:
        pickle.dump(EXPECTED, f)
    print(f"wrote {len(EXPECTED)} datasets into {OUT}")
