"""One training epoch on a stoker dataset, one process per device, under torchrun.

stoker.ImageLoader takes the rank and world size from torchrun's environment and reads through
the job's cache when STOKER_NODE names a `stoker node` socket; every rank gets the same number
of batches, so DistributedDataParallel never waits on a short rank. NCCL on GPUs (the batches
are made on the GPU), gloo on CPUs. With feeders (STOKER_FEEDERS, docs/feeders.md) the batches are
made on the CPU path, where feeders help, and copied to the GPU. Used as it is by the Slurm
recipes (deploy/slurm/train.sbatch, train-feeders.sbatch, docs/slurm.md) and the Kubernetes
walk-through (deploy/kubernetes/train-job.yaml).

    torchrun --nproc-per-node 8 train_one_epoch.py /data/photos.stoker
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import stoker


def model(name: str, classes: int) -> torch.nn.Module:
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=classes)
    # "linear": a model that costs nothing, for tests of the plumbing
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                               torch.nn.Linear(3 * 4 * 4, classes))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", help="path or URI of the dataset")
    p.add_argument("--model", choices=["resnet18", "linear"], default="resnet18")
    p.add_argument("--batch", type=int, default=64, help="images per batch per rank")
    p.add_argument("--size", type=int, default=224, help="crop size")
    p.add_argument("--report", help="write this rank's numbers as JSON to REPORT.<rank>")
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else None
    classes = len(stoker.Dataset(a.dataset).classes)
    # Feeders make batches for the CPU path only: with them, batches are copied to the GPU.
    feeders = bool(os.environ.get("STOKER_FEEDERS"))
    loader = stoker.ImageLoader(a.dataset, batch_size=a.batch, size=a.size, drop_last=True,
                                device=None if feeders else device)
    net = torch.nn.parallel.DistributedDataParallel(
        model(a.model, classes).to(device or "cpu"), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    start, images, loss = time.monotonic(), 0, torch.zeros(())
    for batch, labels in loader:
        if feeders and cuda:
            batch, labels = (batch.to(device, non_blocking=True),
                             labels.to(device, non_blocking=True))
        loss = torch.nn.functional.cross_entropy(net(batch), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        images += len(labels)
    report = {"rank": rank, "world_size": dist.get_world_size(), "images": images,
              "seconds": round(time.monotonic() - start, 3), "loss": float(loss.detach()),
              "node_cache": bool(os.environ.get("STOKER_NODE"))}
    # What feeders made of this rank's batches (0 without feeders), and what its threads made.
    stats = loader.stats()
    report["feeders"] = len(stats.get("feeders", []))
    report["feeder_samples"] = sum(f["samples"] for f in stats.get("feeders", []))
    report["local_slices"] = stats.get("local_slices", 0)
    print(json.dumps(report), flush=True)
    if a.report:
        with open(f"{a.report}.{rank}", "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Everything is written. torch's gloo backend sometimes aborts while the interpreter tears
    # down ("terminate called without an active exception" from a gloo worker thread, about one
    # run in ten here, with or without stoker's loaders): leave without that teardown, so that
    # torchrun (and a Slurm job) sees the rank's real outcome.
    sys.stdout.flush()
    os._exit(0)
