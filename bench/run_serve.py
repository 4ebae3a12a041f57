#!/usr/bin/env python3
"""Reading a dataset from `stoker serve` across a throttled link, in network namespaces.

    sudo python3 bench/run_serve.py [--rate 1gbit] [--delay-ms 1] [--reps 3]

Two hosts on the netns testbed (tests/netns/testbed.py): `storage` runs `stoker serve` on the
cached ImageNet-like subset packed by bench/run_decode.py (5,000 JPEGs, 4.54 bits/pixel), `node`
reads it. Both links are shaped with tbf to --rate; the node reaches the server through the
delaying relay (--delay-ms each way, so RTT +2×delay). Measured in the same run, on the same
path:
  link     one TCP stream of the same number of bytes (the ceiling any reader can reach)
  stoker   one epoch through stoker.Loader(stoker://…, shuffle="chunk"): every sample read and
           CRC-checked, in the chunk-shuffled order
Reported: MB/s and the ratio stoker / link. Results JSON in $STOKER_BENCH_CACHE/results/.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "netns"))
import benchlib  # noqa: E402
from benchlib import CACHE, log  # noqa: E402
from testbed import Testbed, transfer, wait_for_port  # noqa: E402

_EPOCH = r"""
import json, sys, time
import stoker
loader = stoker.Loader(sys.argv[1], shuffle="chunk", seed=int(sys.argv[2]))
t = time.perf_counter(); n = b = 0
for data, label, path in loader:
    n += 1; b += len(data)
print(json.dumps({"samples": n, "bytes": b, "seconds": time.perf_counter() - t,
                  "stats": loader.stats()}))
"""


def main() -> int:
    ap = benchlib.argument_parser(__doc__)
    ap.add_argument("--dataset", type=Path,
                    default=CACHE / "decode" / "imagenet-20000-c100-s1-first25c.stoker")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    stoker_exe = HERE.parent / ".venv" / "bin" / "stoker"
    python = HERE.parent / ".venv" / "bin" / "python"
    if not (args.dataset / "versions").is_dir():
        sys.exit(f"{args.dataset}: run bench/run_decode.py first (it packs the subset)")
    payload = sum(f.stat().st_size for f in (args.dataset / "chunks").iterdir())
    secret = CACHE / "serve-secret"
    secret.write_text("benchmark-secret-0123456789abcdef\n")
    secret.chmod(0o600)
    env = dict(os.environ, STOKER_SECRET_FILE=str(secret))
    results = {"machine": benchlib.machine(), "rate": args.rate, "delay_ms": args.delay_ms,
               "chunk_bytes": payload, "runs": []}
    with Testbed("stk-bench-serve", ["storage", "node"], rate=args.rate) as tb:
        storage, node = tb["storage"], tb["node"]
        server = storage.popen([str(stoker_exe), "serve", "--listen", f"{storage.ip}:7070",
                                "--dataset", f"train={args.dataset}", "--secret-file",
                                str(secret)], stderr=subprocess.DEVNULL)
        wait_for_port(node, storage.ip, 7070)
        relay = tb.relay(storage, 7070, delay_ms=args.delay_ms)
        uri = f"stoker://{relay.address}/train"
        for rep in range(args.reps):
            # The link ceiling: one TCP stream storage -> node (the direction the data flows)
            # over the same shaped links, without the relay's delay.
            link = transfer(storage, node, payload, verify=False)
            run = node.run([str(python), "-c", _EPOCH, uri, str(rep)], env=env, timeout=600)
            epoch = json.loads(run.stdout.strip().splitlines()[-1])
            row = {"link_MBps": link["bytes"] / link["seconds"] / 1e6,
                   "stoker_MBps": epoch["bytes"] / epoch["seconds"] / 1e6,
                   "samples": epoch["samples"], "samples_per_s": epoch["samples"] / epoch["seconds"],
                   "stats": epoch["stats"]}
            row["ratio"] = row["stoker_MBps"] / row["link_MBps"]
            log(f"rep {rep}: link {row['link_MBps']:.0f} MB/s, stoker {row['stoker_MBps']:.0f} "
                f"MB/s ({row['samples_per_s']:.0f} samples/s) = {row['ratio']:.2f} of the link")
            results["runs"].append(row)
        storage.kill(server)
    path = benchlib.save("serve", results)
    ratios = sorted(r["ratio"] for r in results["runs"])
    print(f"stoker / link, median of {len(ratios)}: {ratios[len(ratios) // 2]:.2f}  ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
