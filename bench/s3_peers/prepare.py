#!/usr/bin/env python3
"""Lays out the benchmark data set in an S3 bucket in the peers' formats (bench/run_s3.py).

    prepare.py TREE WORKDIR BUCKET STEP...      (AWS_* environment names the endpoint)

Steps:
  expected  WORKDIR/expected.json: {relpath: [size, crc32c]} of every file under TREE
  files     one object per image, key files/<class>/<file>.JPEG (as many users store it)
  wds       WebDataset tar shards: the files in a shuffled order (seed 0) cut into --shards
            shards (<class>/<stem>.jpg + .cls members), written to WORKDIR/wds and uploaded to
            wds/shard-NNNNNN.tar
  mds       MosaicML Streaming MDS shards (columns image: bytes, key: str, label: int; no
            compression; size_limit ~ the wds shard size), written to WORKDIR/mds with MDSWriter
            and uploaded under mds/
Prints one JSON line per step with its seconds.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import crc, s3_client  # noqa: E402


def tree_files(tree: Path) -> list[str]:
    out = []
    for d in sorted(p for p in tree.iterdir() if p.is_dir()):
        out += [f"{d.name}/{f.name}" for f in sorted(d.iterdir()) if f.is_file()]
    return out


def upload_many(client, bucket: str, items, threads: int = 16) -> None:
    def put(item):
        key, path = item
        client.upload_file(str(path), bucket, key)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, items))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree", type=Path)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("bucket")
    ap.add_argument("steps", nargs="+", choices=("expected", "files", "wds", "mds"))
    ap.add_argument("--shards", type=int, default=64)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    rels = tree_files(args.tree)
    labels = {c: i for i, c in enumerate(sorted({r.split("/")[0] for r in rels}))}
    client = s3_client(32)
    for step in args.steps:
        t = time.perf_counter()
        if step == "expected":
            exp = {}
            for r in rels:
                data = (args.tree / r).read_bytes()
                exp[r] = [len(data), crc(data)]
            (args.workdir / "expected.json").write_text(json.dumps(exp))
        elif step == "files":
            upload_many(client, args.bucket, [(f"files/{r}", args.tree / r) for r in rels], 32)
        elif step == "wds":
            out = args.workdir / "wds"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            order = list(rels)
            random.Random(0).shuffle(order)
            per = -(-len(order) // args.shards)
            names = []
            for s in range(args.shards):
                name = out / f"shard-{s:06d}.tar"
                with tarfile.open(name, "w", format=tarfile.USTAR_FORMAT) as tar:
                    for r in order[s * per:(s + 1) * per]:
                        stem = r.rsplit(".", 1)[0]
                        for ext, data in (("jpg", (args.tree / r).read_bytes()),
                                          ("cls", str(labels[r.split("/")[0]]).encode())):
                            info = tarfile.TarInfo(f"{stem}.{ext}")
                            info.size, info.mtime, info.mode = len(data), 0, 0o644
                            tar.addfile(info, io.BytesIO(data))
                names.append(name)
            upload_many(client, args.bucket, [(f"wds/{n.name}", n) for n in names])
        elif step == "mds":
            from streaming import MDSWriter
            out = args.workdir / "mds"
            shutil.rmtree(out, ignore_errors=True)
            total = sum((args.tree / r).stat().st_size for r in rels)
            limit = max(total // args.shards, 1 << 20)
            with MDSWriter(out=str(out), columns={"image": "bytes", "key": "str",
                                                  "label": "int"},
                           compression=None, hashes=[], size_limit=int(limit * 1.02)) as w:
                for r in rels:
                    w.write({"image": (args.tree / r).read_bytes(), "key": r,
                             "label": labels[r.split("/")[0]]})
            upload_many(client, args.bucket,
                        [(f"mds/{p.name}", p) for p in sorted(out.iterdir())])
        print(json.dumps({"step": step, "seconds": time.perf_counter() - t}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
