"""Spark writes (issue 40, "Measure"): df.write.format("stoker") against MosaicML Streaming's
dataframe_to_mds, the same DataFrame of ImageNet-like JPEGs + captions, Spark local-cluster
[2,1,1024] (two executors of one core and 1 GiB each, on loopback) for both.

    .venv/bin/python bench/run_spark_write.py [--images 5000] [--classes 50] [--repeat 3]
        [--mds-python .venv-torchvision/bin/python] [--mds-compression none]

The DataFrame: spark.read.parquet of one Parquet file {image: binary, caption: string, label:
int64} (row groups of --row-group rows), read anew for every write. Each system runs in a
worker process of its own Python (Streaming imports torch and torchvision, which need a venv of
their own: --mds-python, with mosaicml-streaming and pyspark 4.0.1), each with its SparkSession
of the same configuration, kept for the whole run; one untimed write each first (the JVMs and
Python workers start). Then --repeat rounds, the two alternating (the order reversed every
other round). A write is timed from the call to its return, when the dataset is complete:

  stoker  df.write.format("stoker").mode("append").option("columns", "image=jpeg").save(out):
          a part per task, one version published at the driver's commit.
  mds     streaming.base.converters.dataframe_to_mds(df, merge_index=True, mds_kwargs={out,
          columns {image: bytes, caption: str, label: int64}, compression: --mds-compression
          (none: its fastest; zstd is dataframe_to_mds's default)}): an MDS directory per
          task, their indexes merged into out/index.json at the driver.

  floor   Spark alone: df.mapInArrow(count the rows).collect() (the same Parquet read, Arrow
          batches shipped to a Python worker): what any Python writer costs at the least.

After each write (untimed) the output is checked: stoker.Dataset(out) holds every row; the
merged MDS index counts every row. Results JSON in $STOKER_BENCH_CACHE/results/spark-write-*.json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORDS = ("a photo of the small large red green dog cat tree house car street person "
         "mountain river boat bird flower field city night light old new").split()
MDS_COLUMNS = {"image": "bytes", "caption": "str", "label": "int64"}


# --- a worker: one system's SparkSession, a write per line of stdin --------------------------

def session(jars: str = ""):
    os.environ["SPARK_SCALA_VERSION"] = "2.13"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("stoker-bench")
             .config("spark.jars", jars)
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def count_rows(batches):
    """mapInArrow: Spark's own part of a write, the rows shipped to Python and counted."""
    import pyarrow as pa
    yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)]})


def worker(python: str, parquet: str, compression: str) -> None:
    """Commands on stdin, "SYSTEM OUT", a JSON answer each: stoker and floor in this repo's
    venv, mds in the one with Streaming."""
    if python == "stoker":
        import stoker
        import stoker.spark
        # The executors run `stoker pack -` for format("stoker-jvm"): this venv's CLI.
        os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        spark = session(stoker.spark.jar())
        stoker.spark.register(spark)
    else:
        from streaming.base.converters import dataframe_to_mds
        spark = session()
    print(json.dumps({"ready": python}), flush=True)
    for line in sys.stdin:
        system, out = line.split()
        df = spark.read.parquet(parquet)
        t = time.perf_counter()
        if system in ("stoker", "stoker-jvm"):
            df.write.format(system).mode("append").option("columns", "image=jpeg").save(out)
        elif system == "floor":
            rows = sum(r.rows for r in df.mapInArrow(count_rows, "rows long").collect())
        else:
            dataframe_to_mds(df, merge_index=True, mds_kwargs={
                "out": out, "columns": MDS_COLUMNS,
                "compression": None if compression == "none" else compression})
        seconds = time.perf_counter() - t
        if system.startswith("stoker"):
            rows = len(stoker.Dataset(out))
        elif system == "mds":
            index = json.loads((Path(out) / "index.json").read_text())
            rows = sum(s["samples"] for s in index["shards"])
        print(json.dumps({"seconds": seconds, "rows": rows,
                          "partitions": df.rdd.getNumPartitions()}), flush=True)
    spark.stop()


class Worker:
    def __init__(self, python: str, kind: str, parquet: Path, compression: str) -> None:
        self.proc = subprocess.Popen([python, __file__, "--worker", kind, str(parquet),
                                      compression],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.answer()

    def answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited ({self.proc.wait()}): see its stderr above")
        return json.loads(line)

    def run(self, system: str, out: Path) -> dict:
        self.proc.stdin.write(f"{system} {out}\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


# --- the driver ------------------------------------------------------------------------------

def make_parquet(tree: Path, out: Path, seed: int, row_group: int) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(seed)
    images, captions, labels = [], [], []
    for label, cls in enumerate(sorted(p.name for p in tree.iterdir() if p.is_dir())):
        for f in sorted((tree / cls).iterdir()):
            images.append(f.read_bytes())
            captions.append(" ".join(rng.choice(WORDS, size=int(rng.integers(6, 16)))))
            labels.append(label)
    pq.write_table(pa.table({"image": pa.array(images, pa.binary()), "caption": captions,
                             "label": pa.array(labels, pa.int64())}), out,
                   row_group_size=row_group)
    return len(images)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3], sys.argv[4])
    sys.path.insert(0, str(HERE))
    import benchlib
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--row-group", type=int, default=1000)
    p.add_argument("--mds-compression", default="none", help="MDSWriter's compression "
                   "(none, or e.g. zstd: dataframe_to_mds's default)")
    p.add_argument("--mds-python", default=str(REPO / ".venv-torchvision" / "bin" / "python"))
    p.set_defaults(images=5000, classes=50)
    a = p.parse_args()
    if not Path(a.mds_python).exists():
        sys.exit(f"no {a.mds_python}: a venv with mosaicml-streaming and pyspark==4.0.1")
    work = benchlib.CACHE / "spark-write"
    benchlib.rmtree(work)
    work.mkdir(parents=True)
    tree, summary = benchlib.sample_data(a.images, a.classes, a.seed)
    parquet = work / "images.parquet"
    rows = make_parquet(tree, parquet, a.seed, a.row_group)
    benchlib.log(benchlib.data_line(summary))
    stoker_side = Worker(sys.executable, "stoker", parquet, a.mds_compression)
    mds_side = Worker(a.mds_python, "mds", parquet, a.mds_compression)
    workers = {"stoker": stoker_side, "stoker-jvm": stoker_side, "mds": mds_side,
               "floor": stoker_side}
    res: dict[str, list[dict]] = {name: [] for name in workers}
    try:
        for r in range(-1, a.repeat):  # round -1: the untimed one
            for name in list(workers)[::-1 if r % 2 else 1]:
                out = work / f"{name}-{r}"
                run = workers[name].run(name, out)
                benchlib.rmtree(out)
                if run["rows"] != rows:
                    raise RuntimeError(f"{name} wrote {run['rows']} rows of {rows}")
                run["rate"] = rows / run["seconds"]
                when = f"round {r + 1}" if r >= 0 else "warm-up"
                benchlib.log(f"{when} {name:10s} {run['seconds']:6.1f} s "
                             f"{run['rate']:6,.0f} samples/s ({run['partitions']} partitions)")
                if r >= 0:
                    res[name].append(run)
    finally:
        stoker_side.close()
        mds_side.close()
    ratios = {name: [s["rate"] / m["rate"] for s, m in zip(res[name], res["mds"], strict=True)]
              for name in ("stoker", "stoker-jvm")}
    medians = {name: benchlib.median([x["rate"] for x in runs]) for name, runs in res.items()}
    benchlib.log(f"stoker {medians['stoker']:,.0f}/s, stoker-jvm {medians['stoker-jvm']:,.0f}/s, "
                 f"mds {medians['mds']:,.0f}/s, Spark alone {medians['floor']:,.0f}/s")
    for name, per_round in ratios.items():
        benchlib.log(f"{name} / mds per round {', '.join(f'{x:.2f}' for x in per_round)} "
                     f"(median {benchlib.median(per_round):.2f}x)")
    benchlib.save("spark-write", {
        "data": summary, "rows": rows, "row_group": a.row_group, "runs": res, "medians": medians,
        "ratio_per_round": ratios["stoker"], "ratio_median": benchlib.median(ratios["stoker"]),
        "jvm_ratio_per_round": ratios["stoker-jvm"],
        "jvm_ratio_median": benchlib.median(ratios["stoker-jvm"]),
        "mds_python": a.mds_python, "mds_compression": a.mds_compression,
        "machine": benchlib.machine(), "argv": sys.argv})


if __name__ == "__main__":
    main()
