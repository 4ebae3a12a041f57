"""Ray Data reads (issue 40, "Measure"): stoker.ray.read against ray.data.read_parquet,
read_images and read_binary_files, on a local Ray cluster of a head without CPUs and two worker
nodes of one CPU each (all on loopback), the same samples to the trainer's
iter_torch_batches(batch_size=256).

    .venv/bin/python bench/run_ray_read.py [--images 3000] [--classes 30] [--docs 20000]
        [--repeat 3]

  bytes    the encoded JPEG and its label, every batch: stoker.ray.read of a column dataset
           {image: jpeg, label: int} (stoker.Writer, default chunks); ray.data.read_parquet of
           the same {image: binary, label: int64} in --parquet-files files of row groups of
           --row-group rows; ray.data.read_binary_files of the JPEG tree (the raw files; the
           label from the path). A collate_fn hands over (list of bytes, int64 label tensor).
  decoded  the same stoker and Parquet reads with map_batches(PIL open, resize to 224x224
           BILINEAR, RGB: what read_images does per file), against ray.data.read_images(size=
           (224, 224), mode="RGB", include_paths=True) with the label from the path in a
           map_batches; batches of uint8 224x224x3 and int64 labels. One more stoker row is
           stoker.ray.read_images(size=224, center_crop=False): the same resize of the whole
           image, decoded and resized in the read tasks by stoker's C++ decoder and resampler
           (what ImageLoader runs) instead of PIL (stoker_read_images).
  tokens   --docs documents of 100-2,000 uint16 tokens: a stoker column dataset {tokens:
           tokens:uint16} against Parquet list<uint16> (same file layout), iter_batches(256,
           batch_format="numpy"); tokens/s.

Every pass is timed from the read call (planning included) to the last batch; the driver
consumes every batch. One untimed pass of each first (worker processes start, modules import,
the page cache fills: this measures CPU, not storage). --repeat rounds, the systems' order
reversed every other round; per system the median round, and per round stoker's ratio to the
better peer (the ratios' median is the result). Results JSON in $STOKER_BENCH_CACHE/results/
ray-read-*.json.
"""
from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process on loopback
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402
import ray.data  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.data.collate_fn import ArrowBatchCollateFn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

import stoker  # noqa: E402
import stoker.ray  # noqa: E402

SIZE = 224


# --- data ----------------------------------------------------------------------------------

def image_files(tree: Path) -> tuple[list[Path], list[int], dict[str, int]]:
    classes = {name: i for i, name in enumerate(sorted(p.name for p in tree.iterdir()
                                                       if p.is_dir()))}
    files = sorted(tree.glob("*/*.jpg")) + sorted(tree.glob("*/*.JPEG"))
    return files, [classes[f.parent.name] for f in files], classes


def write_parquet(table: pa.Table, out: Path, files: int, row_group: int) -> None:
    out.mkdir(parents=True)
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), files)):
        pq.write_table(table.take(part), out / f"part-{i:03d}.parquet", row_group_size=row_group)


def prepare(a, work: Path) -> dict:
    tree, summary = benchlib.sample_data(a.images, a.classes, a.seed)
    files, labels, classes = image_files(tree)
    images = [f.read_bytes() for f in files]
    with stoker.Writer(work / "images.stoker", columns={"image": "jpeg", "label": "int"},
                       progress=False) as w:
        for image, label in zip(images, labels, strict=True):
            w.write({"image": image, "label": label})
    table = pa.table({"image": pa.array(images, pa.binary()),
                      "label": pa.array(labels, pa.int64())})
    write_parquet(table, work / "images.parquet", a.parquet_files, a.row_group)
    del images, table

    rng = np.random.default_rng(a.seed)
    lengths = rng.integers(100, 2001, size=a.docs)
    tokens = rng.integers(0, 50257, size=int(lengths.sum()), dtype=np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    with stoker.Writer(work / "tokens.stoker", columns={"tokens": "tokens:uint16"},
                       progress=False) as w:
        for i in range(a.docs):
            w.write({"tokens": tokens[offsets[i]:offsets[i + 1]]})
    docs = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
    write_parquet(pa.table({"tokens": docs}), work / "tokens.parquet", a.parquet_files,
                  a.row_group * 8)
    benchlib.log(benchlib.data_line(summary))
    benchlib.log(f"{a.docs} token documents, {len(tokens):,} uint16 tokens")
    return {"tree": tree, "summary": summary, "classes": classes, "tokens": int(len(tokens)),
            "stoker_chunks": stoker.Dataset(work / "images.stoker").num_chunks,
            "stoker_token_chunks": stoker.Dataset(work / "tokens.stoker").num_chunks}


# --- what runs in Ray's workers and the driver's collate -------------------------------------

def decode_224(batch: dict) -> dict:
    """PIL open, resize to 224x224 (BILINEAR), RGB: ray.data.read_images' steps per file."""
    from PIL import Image
    out = np.empty((len(batch["image"]), SIZE, SIZE, 3), np.uint8)
    for i, data in enumerate(batch["image"]):
        im = Image.open(io.BytesIO(data))
        im = im.resize((SIZE, SIZE), resample=Image.BILINEAR)
        if im.mode != "RGB":
            im = im.convert("RGB")
        out[i] = np.asarray(im)
    return {"image": out, "label": batch["label"]}


class BytesToTrainer(ArrowBatchCollateFn):
    """(list of the JPEGs' bytes, int64 label tensor); labels from the path where the rows
    have none (read_binary_files)."""

    def __init__(self, classes: dict[str, int]) -> None:
        self.classes = classes

    def __call__(self, batch: pa.Table):
        import torch
        images = batch.column("bytes" if "bytes" in batch.column_names else "image").to_pylist()
        if "label" in batch.column_names:
            labels = batch.column("label").to_numpy()
        else:
            labels = np.array([self.classes[p.rsplit("/", 2)[-2]]
                               for p in batch.column("path").to_pylist()], np.int64)
        return images, torch.from_numpy(labels)


def label_from_path(classes: dict[str, int]):
    def fn(batch: dict) -> dict:
        labels = np.array([classes[p.rsplit("/", 2)[-2]] for p in batch["path"]], np.int64)
        return {"image": batch["image"], "label": labels}
    return fn


# --- the passes ------------------------------------------------------------------------------

def bytes_pass(ds, classes) -> int:
    n = 0
    for images, labels in ds.iter_torch_batches(batch_size=256,
                                                collate_fn=BytesToTrainer(classes)):
        assert len(images) == len(labels)
        n += len(labels)
    return n


def decoded_pass(ds) -> int:
    n = 0
    for batch in ds.iter_torch_batches(batch_size=256):
        assert batch["image"].shape[1:] == (SIZE, SIZE, 3)
        n += len(batch["label"])
    return n


def tokens_pass(ds) -> int:
    n = 0
    for batch in ds.iter_batches(batch_size=256, batch_format="numpy"):
        n += sum(len(t) for t in batch["tokens"])
    return n


def systems(work: Path, d: dict) -> dict:
    tree, classes = str(d["tree"]), d["classes"]
    return {
        "bytes": {
            "stoker": lambda: bytes_pass(stoker.ray.read(work / "images.stoker"), classes),
            "read_parquet": lambda: bytes_pass(
                ray.data.read_parquet(str(work / "images.parquet")), classes),
            "read_binary_files": lambda: bytes_pass(
                ray.data.read_binary_files(tree, include_paths=True), classes)},
        "decoded": {
            "stoker": lambda: decoded_pass(
                stoker.ray.read(work / "images.stoker").map_batches(decode_224)),
            "read_parquet": lambda: decoded_pass(
                ray.data.read_parquet(str(work / "images.parquet")).map_batches(decode_224)),
            "stoker_read_images": lambda: decoded_pass(stoker.ray.read_images(
                work / "images.stoker", size=SIZE, center_crop=False)),
            "read_images": lambda: decoded_pass(
                ray.data.read_images(tree, size=(SIZE, SIZE), mode="RGB", include_paths=True)
                .map_batches(label_from_path(classes)))},
        "tokens": {
            "stoker": lambda: tokens_pass(stoker.ray.read(work / "tokens.stoker")),
            "read_parquet": lambda: tokens_pass(
                ray.data.read_parquet(str(work / "tokens.parquet")))},
    }


def timed(fn) -> dict:
    t = time.perf_counter()
    n = fn()
    return {"seconds": time.perf_counter() - t, "count": n}


def start_cluster(object_store: int) -> Cluster:
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False,
        "object_store_memory": object_store})
    for _ in range(2):
        c.add_node(num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=object_store)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    return c


def main() -> None:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--docs", type=int, default=20000)
    p.add_argument("--parquet-files", type=int, default=4)
    p.add_argument("--row-group", type=int, default=256, help="rows per Parquet row group "
                   "(images; token files: 8x)")
    p.add_argument("--object-store-mb", type=int, default=1024, help="per node")
    p.add_argument("--repeat", type=int, default=3)
    p.set_defaults(images=3000, classes=30)
    a = p.parse_args()
    work = benchlib.CACHE / "ray-read"
    benchlib.rmtree(work)
    work.mkdir(parents=True)
    data = prepare(a, work)
    expect = {"bytes": a.images, "decoded": a.images, "tokens": data["tokens"]}
    cluster = start_cluster(a.object_store_mb << 20)
    try:
        table = systems(work, data)
        for kind, runs in table.items():  # the untimed pass
            for name, fn in runs.items():
                benchlib.log(f"warm-up {kind} {name}: {timed(fn)['seconds']:.1f} s")
        res: dict = {k: {n: [] for n in v} for k, v in table.items()}
        for r in range(a.repeat):
            for kind, runs in table.items():
                names = list(runs)[::-1 if r % 2 else 1]
                for name in names:
                    run = timed(runs[name])
                    if run["count"] != expect[kind]:
                        raise RuntimeError(f"{kind} {name}: {run['count']} != {expect[kind]}")
                    run["rate"] = run["count"] / run["seconds"]
                    res[kind][name].append(run)
                    benchlib.log(f"round {r + 1} {kind:8s} {name:18s} {run['rate']:12,.0f}/s")
    finally:
        ray.shutdown()
        cluster.shutdown()

    medians = {k: {n: benchlib.median([x["rate"] for x in v]) for n, v in runs.items()}
               for k, runs in res.items()}
    ratios = {}
    for kind, runs in res.items():
        peers = [n for n in runs if not n.startswith("stoker") and n != "read_binary_files"]
        line = ", ".join(f"{n} {v:,.0f}/s" for n, v in medians[kind].items())
        benchlib.log(f"{kind}: {line}")
        for mine in (n for n in runs if n.startswith("stoker")):
            per_round = [runs[mine][r]["rate"] / max(runs[n][r]["rate"] for n in peers)
                         for r in range(a.repeat)]
            ratios[f"{kind}_{mine}"] = {"vs_better_peer_per_round": per_round,
                                        "vs_better_peer_median": benchlib.median(per_round),
                                        "peers": peers}
            benchlib.log(f"  {mine} / better peer per round "
                         f"{', '.join(f'{x:.2f}' for x in per_round)} (median "
                         f"{benchlib.median(per_round):.2f}x)")
    benchlib.save("ray-read", {
        "data": data["summary"], "docs": a.docs, "tokens": data["tokens"],
        "stoker_chunks": data["stoker_chunks"], "stoker_token_chunks": data["stoker_token_chunks"],
        "parquet_files": a.parquet_files, "row_group": a.row_group, "runs": res,
        "medians": medians, "ratios": ratios, "ray": ray.__version__,
        "machine": benchlib.machine(), "argv": sys.argv})


if __name__ == "__main__":
    main()
