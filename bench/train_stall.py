"""A real training run as the benchmark (issue 17 item 5): a ResNet trained for a fixed number
of steps on ImageNet-like JPEGs, fed by stoker.ImageLoader (CPU decode, or `stoker-gpu`:
device="cuda", nvJPEG), by torchvision's ImageFolder + DataLoader, or by DALI, on the same
machine; images/s and the data-starved share, measured the same way for all by this harness
(the time the loop spent in next(loader) over the wall time of the timed steps) and, for
stoker, by its own attribution (loader.stats()).

    .venv/bin/python bench/train_stall.py [--images 2000] [--steps 30] [--batch 32] [--size 224]
    python3 bench/train_stall.py --device cuda --model resnet50 --amp --same-python \
        --systems stoker-gpu,stoker,torchvision --workers 16 --batch 256    # on a GPU machine

The models are ResNet-18 and ResNet-50 defined below (torch.nn only, so the same code runs in
stoker's venv, whose torch 2.13 has no torchvision, and in the peers' venv); SGD,
cross-entropy, the RandomResizedCrop + flip + normalize transform of ImageNet training for
every loader. On a GPU (`--device cuda`) the images move to the GPU each step (stoker-gpu's
are made there), `--amp` trains in bfloat16 autocast with channels-last tensors; on the CPU the
training and the loader share the cores, which is what the numbers then show. torchvision's
side runs in $STOKER_BENCH_CACHE/venv-streaming (bash bench/setup_peers.sh streaming: torch
2.14.1 + torchvision 0.29.1) and DALI's in venv-dali (bash bench/setup_peers.sh dali), or all in
this interpreter with --same-python (a GPU machine's own torch + torchvision).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("STOKER_BENCH_CACHE", "/var/tmp/stoker-bench"))


# -- the model (both sides) ------------------------------------------------------------------

def _parts():
    """What both ResNets are built of (torch is imported only where a model is made): torch.nn,
    the residual block around a body, and the stem."""
    import torch.nn as nn

    class Residual(nn.Module):
        """body(x) plus x — through a 1x1 projection where the shape changes — then ReLU."""

        def __init__(self, body, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = body
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    stem = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1)]
    return nn, Residual, stem


def resnet18(classes: int):
    """He et al.'s ResNet-18: a 7x7 stem, four stages of two basic blocks (64..512 channels),
    global average pooling, a linear classifier."""
    nn, Residual, layers = _parts()

    def basic(cin: int, cout: int, stride: int):
        return Residual(nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)), cin, cout, stride)

    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [basic(cin, cout, stride), basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def resnet50(classes: int):
    """He et al.'s ResNet-50: the stem, four stages of 3, 4, 6, 3 bottleneck blocks (1x1, 3x3,
    1x1 convolutions, 4x expansion; torchvision's v1.5 stride placement), pooling, a linear
    classifier."""
    nn, Residual, layers = _parts()

    def bottleneck(cin: int, width: int, stride: int):
        cout = width * 4
        return Residual(nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)),
            cin, cout, stride)

    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


# "none": no model, the loop only takes batches (and moves them to the device): the loader's
# own throughput.
MODELS = {"resnet18": resnet18, "resnet50": resnet50, "none": None}


def train(batches, steps: int, warmup: int, classes: int, device: str, model_name: str = "resnet18",
          amp: bool = False) -> dict:
    """Runs warmup + steps training steps over `batches` (an iterator of (images, labels));
    returns the timed steps' images/s and the share of their wall time spent in next()."""
    import contextlib
    import torch
    torch.manual_seed(0)
    layout = torch.channels_last if amp else torch.contiguous_format
    model = None
    if MODELS[model_name] is not None:
        model = MODELS[model_name](classes).to(device).to(memory_format=layout)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    autocast = (torch.autocast(device, dtype=torch.bfloat16) if amp
                else contextlib.nullcontext())
    loss_fn = torch.nn.CrossEntropyLoss()
    waited = images = 0.0
    start = None
    it = iter(batches)
    for step in range(warmup + steps):
        if step == warmup:
            start, waited, images = time.monotonic(), 0.0, 0
        t = time.monotonic()
        x, y = next(it)
        waited += time.monotonic() - t
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        x = x.contiguous(memory_format=layout)
        loss = torch.zeros(())
        if model is not None:
            with autocast:
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        images += len(y)
    wall = time.monotonic() - start
    return {"images_per_second": images / wall, "starved_fraction": waited / wall,
            "seconds": wall, "images": images, "loss": float(loss)}


def endless(make):
    """Epoch after epoch of make()'s batches."""
    while True:
        yield from make()


# -- the systems -------------------------------------------------------------------------------

def run_stoker(a, device: str | None = None) -> dict:
    import stoker
    loader = stoker.ImageLoader(a.dataset, batch_size=a.batch, size=a.size, train=True,
                                seed=1, drop_last=True, device=device,
                                threads=a.workers if a.workers > 2 else None)
    out = train(endless(lambda: iter(loader)), a.steps, a.warmup, a.classes, a.device, a.model,
                a.amp)
    s = loader.stats()
    out["stoker_stats"] = {k: s.get(k) for k in ("starved_fraction", "stall_seconds",
                                                  "wall_seconds", "waiting_seconds")}
    return out


def run_torchvision(a) -> dict:
    import torch
    import torchvision.datasets as datasets
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    ds = datasets.ImageFolder(a.tree, tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True,
                                     num_workers=a.workers, persistent_workers=True,
                                     pin_memory=a.device == "cuda")
    return train(endless(lambda: iter(dl)), a.steps, a.warmup, a.classes, a.device, a.model,
                 a.amp)


def run_dali(a) -> dict:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator
    cpu = a.device != "cuda"

    @pipeline_def(batch_size=a.batch, num_threads=a.workers, device_id=None if cpu else 0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.tree, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="cpu" if cpu else "mixed")
        images = fn.resize(images, resize_x=a.size, resize_y=a.size)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255], std=[0.229 * 255, 0.224 * 255,
                                                              0.225 * 255])
        return images, labels.gpu() if not cpu else labels

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["x", "y"], reader_name="r", auto_reset=True)

    def batches():
        for d in it:
            yield d[0]["x"], d[0]["y"].squeeze(-1).long()
    return train(endless(batches), a.steps, a.warmup, a.classes, a.device, a.model, a.amp)


SYSTEMS = {"stoker": run_stoker, "stoker-gpu": lambda a: run_stoker(a, "cuda"),
           "torchvision": run_torchvision, "dali": run_dali}


def child(argv: list[str]) -> None:
    import argparse
    p = argparse.ArgumentParser()
    for k in ("system", "dataset", "tree", "device", "model"):
        p.add_argument(f"--{k}")
    p.add_argument("--amp", action="store_true")
    for k in ("steps", "warmup", "batch", "size", "classes", "workers"):
        p.add_argument(f"--{k}", type=int)
    a = p.parse_args(argv)
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    print(json.dumps(SYSTEMS[a.system](a)))


def main() -> None:
    sys.path.insert(0, str(HERE))
    import benchlib
    p = benchlib.argument_parser(__doc__)
    p.set_defaults(images=2000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2,
                   help="torchvision/DALI loader processes; above 2, stoker's decode threads too")
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast, channels-last (GPU)")
    p.add_argument("--same-python", action="store_true",
                   help="run every system in this interpreter (e.g. a GPU machine's torch)")
    p.add_argument("--source-dir", action="append",
                   help="photos to make the sample data from (scripts/make_sample_data.py)")
    p.add_argument("--systems", default="stoker,torchvision,dali")
    p.add_argument("--repeats", type=int, default=1)
    a = p.parse_args()
    tree, summary = benchlib.sample_data(a.images, a.classes, a.seed, a.source_dir)
    packed = CACHE / f"train-stall-{a.images}-c{a.classes}.stoker"
    if not packed.exists():
        import stoker
        stoker.pack(str(tree), str(packed))
    pythons = {"stoker": sys.executable, "stoker-gpu": sys.executable,
               "torchvision": str(CACHE / "venv-streaming" / "bin" / "python"),
               "dali": str(CACHE / "venv-dali" / "bin" / "python")}
    if a.same_python:
        pythons = dict.fromkeys(pythons, sys.executable)
    runs: dict[str, list] = {}
    for r in range(a.repeats):
        for system in a.systems.split(","):
            py = pythons[system]
            if not Path(py).exists():
                benchlib.log(f"{system}: no venv at {py} (bench/setup_peers.sh); skipped")
                runs.setdefault(system, []).append({"skipped": f"no venv at {py}"})
                continue
            argv = [py, __file__, "--child", "--system", system, "--dataset", str(packed),
                    "--tree", str(tree), "--device", a.device, "--steps", str(a.steps),
                    "--warmup", str(a.warmup), "--batch", str(a.batch), "--size", str(a.size),
                    "--classes", str(a.classes), "--workers", str(a.workers),
                    "--model", a.model] + (["--amp"] if a.amp else [])
            out = subprocess.run(argv, capture_output=True, text=True)
            if out.returncode != 0:
                benchlib.log(f"{system} failed:\n{out.stderr[-2000:]}")
                runs.setdefault(system, []).append({"failed": out.stderr[-2000:]})
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            runs.setdefault(system, []).append(res)
            benchlib.log(f"repeat {r + 1}: {system:12s} {res['images_per_second']:7.1f} img/s, "
                         f"starved {100 * res['starved_fraction']:5.1f} %"
                         + (f" (stoker's own: {100 * res['stoker_stats']['starved_fraction']:.1f}"
                            " %)" if "stoker_stats" in res else ""))
    benchlib.save("train-stall", {"data": summary, "runs": runs, "argv": sys.argv,
                                  "machine": benchlib.machine()})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
