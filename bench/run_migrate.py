"""Migration (issue 40): stoker.from_mds / stoker.from_litdata converting a dataset that
MDSWriter / litdata.optimize wrote, against writing that dataset again with MDSWriter /
litdata.optimize from the same samples already in memory (the least that re-running the ETL
costs: no decoding, resizing or reading of the original files), in the same run.

    .venv/bin/python bench/run_migrate.py [--images 5000] [--repeats 3] [--peers-python PY]

Samples: ImageNet-like JPEGs from benchlib.sample_data (real photographs, ~110 KB at ~470x390)
with a label and a random caption (bench/run_columns.py's image_samples). The peers' steps are
bench/columns_peers.py's (MDSWriter with 64 MB shards, uncompressed; optimize with 64 MB chunks
and one worker), run by an interpreter with mosaicml-streaming and litdata (default: the
repository's .venv-torchvision, or $STOKER_TORCHVISION_PYTHON). Each conversion runs in a
process of its own, timed inside (imports excluded) with its peak RSS; the source was just
written, so it is read from the page cache. Reported: seconds (best of the repeats), samples/s,
and each peer's time over stoker's (>1: converting is faster than writing again).
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from run_columns import image_samples  # noqa: E402

HERE = Path(__file__).resolve().parent
# Peak RSS from VmHWM, which starts afresh at exec (getrusage's ru_maxrss would carry over
# this benchmark's own footprint: Linux keeps it across fork and exec).
CONVERT = """
import json, re, sys, time
import stoker
convert = {"mds": stoker.from_mds, "litdata": stoker.from_litdata}[sys.argv[1]]
t = time.perf_counter()
summary = convert(sys.argv[2], sys.argv[3], progress=False)
seconds = time.perf_counter() - t
peak = int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({"seconds": seconds, "samples": summary["samples"], "max_rss_mb": peak / 1024}))
"""


def peers_python(given: str | None) -> str:
    for python in (given, os.environ.get("STOKER_TORCHVISION_PYTHON"),
                   str(benchlib.REPO / ".venv-torchvision" / "bin" / "python")):
        if python and os.path.exists(python) and subprocess.run(
                [python, "-c", "import streaming, litdata"], capture_output=True).returncode == 0:
            return python
    sys.exit("no interpreter with mosaicml-streaming and litdata: give --peers-python (the "
             "torchvision venv of scripts/test has them)")


def run_json(argv: list[str]) -> dict:
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(out: Path, samples: list) -> None:
    """The conversion holds every sample, in order (a few compared whole)."""
    import stoker
    ds = stoker.Dataset(out)
    assert len(ds) == len(samples), (len(ds), len(samples))
    for k in (0, len(samples) // 2, len(samples) - 1):
        image, label, caption = samples[k]
        assert ds[k] == {"image": image, "label": label, "caption": caption}, k


def main() -> None:
    p = benchlib.argument_parser(__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peers-python", help="an interpreter with mosaicml-streaming and litdata")
    p.set_defaults(images=5000, classes=50)
    a = p.parse_args()
    python = peers_python(a.peers_python)
    work = benchlib.CACHE / "migrate"
    benchlib.rmtree(work)
    work.mkdir(parents=True)
    tree, data = benchlib.sample_data(a.images, min(a.classes, a.images), a.seed)
    samples = image_samples(tree, a.seed)
    pkl = work / "samples.pkl"
    pkl.write_bytes(pickle.dumps(samples))
    benchlib.log(benchlib.data_line(data))

    runs: dict[str, list[dict]] = {}
    for r in range(a.repeats):
        for fmt, step in (("mds", "mds-write"), ("litdata", "litdata-write")):
            src, out = work / f"{fmt}-src", work / f"{fmt}-{r}.stoker"
            benchlib.rmtree(src)
            runs.setdefault(f"{fmt}_write", []).append(
                run_json([python, str(HERE / "columns_peers.py"), step, str(pkl), str(src)]))
            runs.setdefault(f"{fmt}_convert", []).append(
                run_json([sys.executable, "-c", CONVERT, fmt, str(src), str(out)]))
            check(out, samples)
            benchlib.rmtree(out)
        benchlib.log(f"repeat {r + 1}/{a.repeats}: " + ", ".join(
            f"{k} {v[-1]['seconds']:.2f} s" for k, v in runs.items()))

    best = {k: min(v, key=lambda x: x["seconds"]) for k, v in runs.items()}
    ratios = {fmt: best[f"{fmt}_write"]["seconds"] / best[f"{fmt}_convert"]["seconds"]
              for fmt in ("mds", "litdata")}
    for k, v in best.items():
        benchlib.log(f"{k:16s} {v['seconds']:7.2f} s  {len(samples) / v['seconds']:8,.0f} "
                     f"samples/s" + (f"  peak RSS {v['max_rss_mb']:.0f} MB"
                                     if "max_rss_mb" in v else ""))
    for fmt, ratio in ratios.items():
        benchlib.log(f"{fmt}: writing again takes {ratio:.2f}x as long as from_{fmt}")
    benchlib.save("migrate", {"data": data, "runs": runs, "best": best, "ratios": ratios,
                              "machine": benchlib.machine(), "argv": sys.argv})
    benchlib.rmtree(work)


if __name__ == "__main__":
    main()
