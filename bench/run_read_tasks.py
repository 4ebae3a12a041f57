"""How many read tasks an engine's read of a stoker dataset should have (docs/benchmarks.md §19,
§20): the same read with the default number of tasks and with fixed numbers, on the local
clusters the engines' benchmarks use. Each task of Ray or Spark has a fixed cost (scheduling, a
worker, a Python process for Spark's data sources) that one task per small chunk pays again and
again.

    .venv/bin/python bench/run_read_tasks.py --engine ray    [--tasks 16,8,4] [--repeat 2]
    .venv/bin/python bench/run_read_tasks.py --engine spark  [--tasks 16,8,4] [--repeat 2]

Reads the column dataset bench/run_ray_read.py writes ($STOKER_BENCH_CACHE/ray-read/images.stoker:
3,000 ImageNet-like JPEGs in 73 chunks of ~4 MiB; run that first). Ray: stoker.ray.read to the
driver's iter_torch_batches (bytes, as run_ray_read.py's "bytes" table) and
stoker.ray.read_images(size=224, center_crop=False); Spark: spark.read.format("stoker") and
sum(length(image)) in the JVM. Samples per second (Ray) or seconds (Spark) per round; one
untimed pass of each first.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def ray_sweep(uri: Path, tasks: list[int | None], repeat: int) -> None:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    import run_ray_read as r

    import stoker.ray
    classes = {f"c{i}": i for i in range(1000)}  # labels come from the dataset: unused
    cluster = r.start_cluster(1024 << 20)
    try:
        cases = {}
        for k in tasks:
            cases[f"bytes {k or 'default'}"] = (lambda k=k: r.bytes_pass(
                stoker.ray.read(uri, override_num_blocks=k), classes))
            cases[f"read_images {k or 'default'}"] = (lambda k=k: r.decoded_pass(
                stoker.ray.read_images(uri, size=224, center_crop=False, override_num_blocks=k)))
        for fn in cases.values():
            fn()
        for rnd in range(repeat):
            for name, fn in cases.items():
                t = time.perf_counter()
                n = fn()
                print(f"round {rnd + 1} {name:24s} {n / (time.perf_counter() - t):8,.0f}/s",
                      flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def spark_sweep(uri: Path, tasks: list[int | None], repeat: int) -> None:
    from run_spark_write import session

    import stoker.spark
    spark = session()
    stoker.spark.register(spark)

    def run(k: int | None) -> float:
        reader = spark.read.format("stoker")
        if k:
            reader = reader.option("partitions", str(k))
        t = time.perf_counter()
        reader.load(str(uri)).selectExpr("sum(length(image))").collect()
        return time.perf_counter() - t

    for k in tasks:
        run(k)
    for rnd in range(repeat):
        for k in tasks:
            print(f"round {rnd + 1} partitions {k or 'default':>8} {run(k):6.2f} s", flush=True)
    spark.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("ray", "spark"), required=True)
    p.add_argument("--tasks", default="73,16,8,4", help="fixed task counts besides the default")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    import benchlib
    uri = benchlib.CACHE / "ray-read" / "images.stoker"
    if not uri.exists():
        sys.exit(f"{uri} is missing: run bench/run_ray_read.py first")
    tasks: list[int | None] = [None] + [int(t) for t in a.tasks.split(",") if t]
    (ray_sweep if a.engine == "ray" else spark_sweep)(uri, tasks, a.repeat)


if __name__ == "__main__":
    main()
