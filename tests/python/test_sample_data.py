"""Tests for scripts/make_sample_data.py, the ImageNet-like benchmark data generator.

The generator is run as a subprocess, exactly as benchmarks and docs invoke it. Its source-survey
cache is redirected into a per-module temp dir so the tests neither depend on nor touch ~/.cache.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_sample_data.py"
SOURCE_DIRS = ("/usr/share/wallpapers", "/usr/share/backgrounds")

IMAGES, CLASSES, SEED = 40, 4, 7

pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.skipif(
    not any(os.path.isdir(d) for d in SOURCE_DIRS),
    reason="source photos missing: apt-get install plasma-workspace-wallpapers gnome-backgrounds",
)]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    e = dict(os.environ)
    e["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    return e


def run(env: dict, out: Path, *extra: str, seed: int = SEED,
        check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), str(out), "--images", str(IMAGES),
           "--classes", str(CLASSES), "--seed", str(seed), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*.JPEG"))}


@pytest.fixture(scope="module")
def generated(tmp_path_factory, env) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("sample") / "data"
    proc = run(env, out, "--jobs", "2", "--json")
    return out, json.loads(proc.stdout)


def test_layout(generated):
    out, summary = generated
    classes = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert classes == [f"n{c:08d}" for c in range(CLASSES)]
    files = sorted(out.rglob("*"))
    jpegs = [p for p in files if p.is_file() and p.name != ".stoker-sample.json"]
    assert len(jpegs) == IMAGES
    for p in jpegs:
        assert re.fullmatch(re.escape(p.parent.name) + r"_\d+\.JPEG", p.name), p
    per_class = [len(list((out / c).iterdir())) for c in classes]
    assert max(per_class) - min(per_class) <= 1
    assert summary["images"] == IMAGES and summary["classes"] == CLASSES
    assert summary["total_bytes"] == sum(p.stat().st_size for p in jpegs)


def test_valid_jpegs_with_imagenet_statistics(generated):
    out, summary = generated
    bpps, sizes = [], []
    for p in sorted(out.rglob("*.JPEG")):
        with Image.open(p) as im:
            assert im.format == "JPEG"
            im.load()  # full decode: raises on truncated/corrupt data
            w, h = im.size
            assert im.mode == "RGB"
        assert 440 <= w <= 500 and 330 <= h <= 450, (p, w, h)
        nbytes = p.stat().st_size
        sizes.append(nbytes)
        bpps.append(nbytes * 8 / (w * h))
    mean_bpp = sum(bpps) / len(bpps)
    assert 3.5 <= mean_bpp <= 5.5, mean_bpp
    assert 3.5 <= min(bpps) and max(bpps) <= 5.5, (min(bpps), max(bpps))
    assert 80_000 <= sum(sizes) / len(sizes) <= 130_000  # ImageNet: ~110 KB
    assert abs(summary["mean_bpp"] - mean_bpp) < 1e-6
    assert abs(summary["mean_width"] - 470) < 20 and abs(summary["mean_height"] - 390) < 35


def test_deterministic_across_runs_and_job_counts(generated, env, tmp_path):
    out, _ = generated
    again = tmp_path / "again"
    run(env, again, "--jobs", "1")  # in-process path vs the pool used by the fixture
    a, b = tree_bytes(out), tree_bytes(again)
    assert a.keys() == b.keys()
    assert a == b


def test_different_seed_gives_different_images(generated, env, tmp_path):
    out, _ = generated
    other = tmp_path / "other"
    run(env, other, "--jobs", "2", seed=SEED + 1)
    a, b = tree_bytes(out), tree_bytes(other)
    assert a.keys() == b.keys()
    assert not set(a.values()) & set(b.values())


def test_rerun_is_a_no_op(generated, env):
    out, summary = generated
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.JPEG")}
    proc = run(env, out, "--json")
    again = json.loads(proc.stdout)
    assert again["generated"] is False
    assert again["total_bytes"] == summary["total_bytes"]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.JPEG")} == before


def test_refuses_foreign_directory(env, tmp_path):
    out = tmp_path / "foreign"
    out.mkdir()
    (out / "keep.txt").write_text("not ours")
    proc = run(env, out, check=False)
    assert proc.returncode == 2
    assert (out / "keep.txt").read_text() == "not ours"


def test_no_sources_is_a_clear_error(env, tmp_path):
    empty = tmp_path / "no-photos"
    empty.mkdir()
    proc = run(env, tmp_path / "out", "--source-dir", str(empty), check=False)
    assert proc.returncode == 2
    assert str(empty) in proc.stderr
    assert "plasma-workspace-wallpapers" in proc.stderr
