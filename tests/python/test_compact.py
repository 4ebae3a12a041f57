"""`stoker compact` through the CLI (docs/format.md §3.5, §5.4): the compacted version is the same
dataset — every sample's files, bytes, label and index, and the class list — with fewer
segments; it runs beside concurrent appends without
losing any; every older version stays readable."""
from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import stoker
from conftest import write_tar


def shard(path: Path, first: int, count: int, classes: int) -> None:
    """A WebDataset shard: key.jpg, key.cls and, for every third, key.json."""
    members: dict[str, bytes] = {}
    for k in range(first, first + count):
        members[f"{k:06d}.jpg"] = bytes([k % 251]) * (100 + k % 900)
        members[f"{k:06d}.cls"] = str(k % classes).encode()
        if k % 3 == 0:
            members[f"{k:06d}.json"] = json.dumps({"k": k}).encode()
    write_tar(path, members)


def everything(uri: str, version: int | None = None) -> list:
    """Every sample: its files with their bytes, its label; and the class list."""
    ds = stoker.Dataset(uri, version=version)
    samples = []
    for s in range(len(ds)):
        files = ds.sample_files(s)
        samples.append((s, [(p, ds.read(p)) for p in files], ds.stat(files[0])["label"]))
    return [samples, list(ds.classes)]


def loader_order(uri: str, version: int | None = None) -> list:
    """What the loader yields for one seed: (files, label, key) per sample, in its order."""
    return list(stoker.Loader(stoker.Dataset(uri, version=version), shuffle="chunk", seed=3))


def test_compact_keeps_every_sample_label_and_the_loader_order(tmp_path, stoker_cli):
    ds = tmp_path / "ds"
    # Four appends whose keys interleave (the shards number samples across each other), one of
    # them adding classes.
    for b in range(4):
        members = {}
        for k in range(b, 400, 4):
            members[f"{k:06d}.jpg"] = bytes([k % 251]) * (100 + k % 900)
            members[f"{k:06d}.cls"] = str(k % (3 if b < 3 else 5)).encode()
        write_tar(tmp_path / f"s{b}.tar", members)
        stoker_cli("pack", "-q", "--chunk-size", "16KiB", tmp_path / f"s{b}.tar", ds,
                   *(["--append"] if b else []), check=True)
    before = everything(str(ds))
    order = loader_order(str(ds))

    dry = json.loads(stoker_cli("compact", ds, "--all", "--dry-run", "--json", check=True).stdout)
    assert dry["segments_merged"] == 4 and dry["version"] == 0
    out = json.loads(stoker_cli("compact", ds, "--all", "--json", check=True).stdout)
    assert (out["base_version"], out["version"], out["segments_after"]) == (4, 5, 1)
    assert out["files_merged"] == 800  # 400 samples of a .jpg and a .cls

    assert everything(str(ds)) == before
    assert everything(str(ds), version=4) == before
    # A training run that resumes on version 4 reads what it read (the loader's order mixes in
    # the version, so the new version's order is another one over the same samples).
    assert loader_order(str(ds), version=4) == order
    assert sorted(map(repr, loader_order(str(ds)))) == sorted(map(repr, order))
    assert stoker_cli("verify", ds).returncode == 0
    versions = json.loads(stoker_cli("versions", ds, "--json", check=True).stdout)
    assert versions[-1]["segments"] == 1 and versions[-1]["files_added"] == 0

    # Nothing left: a second compaction says so and publishes nothing.
    again = stoker_cli("compact", ds, check=True)
    assert "nothing to merge" in again.stdout
    assert stoker.Dataset(str(ds)).version == 5


def test_compact_beside_concurrent_appends_loses_nothing(tmp_path, stoker_cli, stoker_exe):
    ds = tmp_path / "ds"
    shard(tmp_path / "base.tar", 0, 50, classes=4)
    stoker_cli("pack", "-q", tmp_path / "base.tar", ds, check=True)
    for w in range(8):
        shard(tmp_path / f"w{w}.tar", 1000 * (w + 1), 30, classes=6)

    results: list[subprocess.CompletedProcess] = []

    def compactor():
        for _ in range(6):
            results.append(subprocess.run([stoker_exe, "compact", str(ds)], capture_output=True,
                                          text=True, timeout=120))

    thread = threading.Thread(target=compactor)
    thread.start()
    writers = [subprocess.Popen([stoker_exe, "pack", "-q", "--append", str(tmp_path / f"w{w}.tar"),
                                 str(ds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for w in range(8)]
    for w, proc in enumerate(writers):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"writer {w}: {err}"
    thread.join()
    # A compaction may lose to another writer's compaction only (there is one compactor here),
    # so each run either merged, found nothing to merge, or rebased over appends.
    for r in results:
        assert r.returncode == 0, r.stderr

    final = stoker.Dataset(str(ds))
    assert final.num_samples == 50 + 8 * 30
    keys = {p for s in range(len(final)) for p in final.sample_files(s)}
    for w in range(8):
        assert f"{1000 * (w + 1):06d}.jpg" in keys
    # Every version that was ever published says what it said: indices never move.
    newest = {final.sample_files(s)[0]: s for s in range(len(final))}
    for v in json.loads(stoker_cli("versions", ds, "--json", check=True).stdout):
        old = stoker.Dataset(str(ds), version=v["version"])
        for s in range(len(old)):
            assert newest[old.sample_files(s)[0]] == s
    assert stoker_cli("verify", ds).returncode == 0
    stoker_cli("compact", ds, "--all", check=True)
    assert everything(str(ds)) == everything(str(ds), version=final.version)
