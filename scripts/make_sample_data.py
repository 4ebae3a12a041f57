#!/usr/bin/env python3
"""Generate an ImageNet-like JPEG tree from real photographs, for stoker tests and benchmarks.

    python scripts/make_sample_data.py OUT --images N [--classes C] [--seed S] [--jobs J] [--json]

Layout is torchvision ImageFolder / ImageNet style: OUT/n00000000/n00000000_0.JPEG, ...

Why real photographs: stoker's benchmarks measure packing, reading and JPEG decoding. Synthetic
noise or tiny smooth crops compress very differently from ImageNet (~1 bit/pixel instead of ~4.5)
and make both I/O volume and decode cost unrealistic. So every image is a downscaled whole photo
(or a crop covering >= 60% of one) from the wallpaper packages Debian ships, re-encoded with a
per-image JPEG quality chosen so the result lands at ImageNet's 4-5 bits per pixel (~110 KB at
~470x390). The few sources are reused many times; random crops (sub-pixel offsets), flips and a
mild colour jitter make every file distinct.

Output is a pure function of (--images, --classes, --seed, the accepted source files, the Pillow
build): --jobs only changes speed. A stamp file .OUT.stoker-sample.json beside OUT makes re-runs with the
same parameters a no-op.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageOps

GENERATOR = "stoker-sample-data/1"  # bump whenever output bytes for the same args would change
STAMP_NAME = ".stoker-sample.json"
DEFAULT_CLASSES = 100

SEARCH_DIRS = ("/usr/share/wallpapers", "/usr/share/backgrounds")
SOURCE_PACKAGES = "plasma-workspace-wallpapers gnome-backgrounds"
PHOTO_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".jxl")

# Sources are decoded once and kept at this long side. Crops keep >= 60% of the area, so every
# output is still a real downscale (>= ~1.5x) from here, and LANCZOS from 1200 px costs ~12 ms per
# image instead of ~20 ms from 1600 px (measured: same bits per pixel as downscaling from the
# full-resolution original).
CACHE_LONG_SIDE = 1200
# Smaller files are thumbnails/screenshots; a 60% crop of them would have to be upscaled.
MIN_SOURCE_SHORT_SIDE = 800

# ImageNet train statistics the output should match: ~470x390 px, 4-5 bits/pixel (~110 KB).
WIDTH_RANGE = (440, 500)  # inclusive; mean 470
HEIGHT_RANGE = (330, 450)  # inclusive; mean 390
BPP_MIN, BPP_MAX = 4.0, 5.0
# Per-image target. ImageNet's ~110 KB at 470x390 is ~4.8 bpp, but the smoother photos top out
# at ~4.2-4.5 bpp at Q_MAX, so aiming high keeps the mean near 4.5 rather than lower.
BPP_TARGET_RANGE = (4.6, 5.0)
# Quality search range. A photo that needs more than q95 to reach BPP_MIN is too smooth to stand
# in for ImageNet content; pushing q higher would only inflate quantisation-noise bytes.
Q_MIN, Q_MAX = 80, 95
MIN_CROP_AREA = 0.6  # crops keep >= 60% of the photo: tiny crops are smooth and compress ~1 bpp
MAX_STRETCH = 1.2  # allowed anisotropic scale when output and photo aspect ratios differ
MAX_ATTEMPTS = 4  # crops that cannot reach BPP_MIN at Q_MAX are retried with larger crops

# Source filter, measured on a centre crop at the mean output size. Flat/gradient artwork and
# vector-style illustrations compress far below photos; the thresholds reject them.
SURVEY_SIZE = (470, 390)
SURVEY_MIN_BPP_Q90 = 2.5
SURVEY_MIN_BPP_Q95 = BPP_MIN
SURVEY_VERSION = 1  # part of the survey cache key

CLASS_DIR_RE = re.compile(r"n\d{8}")


def class_name(c: int) -> str:
    return f"n{c:08d}"


def image_relpath(index: int, classes: int) -> str:
    """Round-robin over classes so every class gets N/C images (+-1) for any N."""
    cls = class_name(index % classes)
    return f"{cls}/{cls}_{index // classes}.JPEG"


# --------------------------------------------------------------------------------------------
# Source discovery and survey
# --------------------------------------------------------------------------------------------


def find_candidates(dirs: list[str]) -> list[str]:
    """All distinct image files Pillow can open under dirs (symlinked duplicates collapsed)."""
    registered = Image.registered_extensions()
    exts = tuple(e for e in PHOTO_EXTS if e in registered)
    seen: set[tuple[int, int]] = set()
    out = []
    for d in dirs:
        for root, _dirs, files in os.walk(d, followlinks=False):
            for name in files:
                if not name.lower().endswith(exts):
                    continue
                path = os.path.realpath(os.path.join(root, name))
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                # Plasma wallpapers ship one file under a dozen resolution-named symlinks.
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                out.append(path)
    return sorted(out)


def fingerprint(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        st = os.stat(p)
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def load_source(path: str) -> Image.Image:
    """Decode a source photo and downscale it to CACHE_LONG_SIDE."""
    with Image.open(path) as f:
        scale = min(1.0, CACHE_LONG_SIDE / max(f.size))
        # JPEG can decode at 1/2, 1/4, 1/8 scale in the DCT domain: much faster for 5K photos,
        # and the LANCZOS step below still does the final, high-quality reduction.
        f.draft("RGB", (math.ceil(f.width * scale), math.ceil(f.height * scale)))
        f.load()
        ImageOps.exif_transpose(f, in_place=True)
        scale = min(1.0, CACHE_LONG_SIDE / max(f.size))
        size = (max(1, round(f.width * scale)), max(1, round(f.height * scale)))
        im = f if f.mode == "RGB" else f.convert("RGB")
        return im.resize(size, Image.LANCZOS) if im.size != size else im.copy()


def jpeg_bytes(im: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    # Baseline, 4:2:0, standard Huffman tables: what the overwhelming majority of ImageNet is.
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def survey_source(path: str) -> tuple[dict, Image.Image | None]:
    """Decide whether a file is a usable photo: (verdict, decoded cache image if accepted)."""
    verdict: dict = {"path": path, "ok": False}
    try:
        with Image.open(path) as probe:
            w, h = probe.size
        verdict["size"] = [w, h]
        if min(w, h) < MIN_SOURCE_SHORT_SIDE:
            verdict["reason"] = "too small"
            return verdict, None
        if w < 0.9 * h:
            # Outputs are landscape-ish (aspect 0.98-1.52); the portrait files in these packages
            # are phone crops of landscape wallpapers, so they would only add stretched duplicates.
            verdict["reason"] = "portrait"
            return verdict, None
        im = load_source(path)
    except Exception as e:  # noqa: BLE001 - any undecodable file is simply not a source
        verdict["reason"] = f"unreadable ({type(e).__name__}: {e})"
        return verdict, None
    w, h = im.size
    sw, sh = SURVEY_SIZE
    box = _crop_box(w, h, sw / sh, 1.0, 0.5, 0.5)
    small = im.resize(SURVEY_SIZE, Image.LANCZOS, box=box)
    px = sw * sh
    bpp90 = len(jpeg_bytes(small, 90)) * 8 / px
    bpp95 = len(jpeg_bytes(small, Q_MAX)) * 8 / px
    verdict.update(bpp_q90=round(bpp90, 3), bpp_q95=round(bpp95, 3))
    if bpp90 < SURVEY_MIN_BPP_Q90:
        verdict["reason"] = f"too smooth ({bpp90:.2f} bpp at q90 < {SURVEY_MIN_BPP_Q90})"
    elif bpp95 < SURVEY_MIN_BPP_Q95:
        verdict["reason"] = f"too smooth ({bpp95:.2f} bpp at q{Q_MAX} < {SURVEY_MIN_BPP_Q95})"
    else:
        verdict.update(ok=True, reason="accepted")
        return verdict, im
    return verdict, None


def _survey_task(args: tuple[str, dict | None]) -> tuple[dict, tuple[int, int, bytes] | None]:
    """Pool task: survey (or, for a cached accept, just decode) one file. The decoded photo goes
    back to the parent as raw bytes so forked generation workers can share it."""
    path, cached = args
    if cached is not None:
        verdict, im = cached, load_source(path)
    else:
        verdict, im = survey_source(path)
    return verdict, None if im is None else (im.width, im.height, im.tobytes())


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stoker" / "sample-sources.json"


def _cache_key(path: str) -> str:
    st = os.stat(path)
    return f"{SURVEY_VERSION}|{PIL.__version__}|{path}|{st.st_size}|{st.st_mtime_ns}"


def survey_sources(candidates: list[str], jobs: int) -> tuple[list[dict], dict]:
    """Survey every candidate. Decoding all ~60 wallpapers (several 5K PNGs) takes ~18 CPU-s, so
    verdicts are remembered in a small user cache; rejected files are then never decoded again.
    Returns (verdicts, {path: decoded cache image} for accepted sources)."""
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    tasks = []
    verdicts = []
    for p in candidates:
        hit = cache.get(_cache_key(p))
        if hit is not None and not hit["ok"]:
            verdicts.append(hit)
        else:
            tasks.append((p, hit))
    # Biggest files first so one slow 5K PNG does not finish alone at the end.
    tasks.sort(key=lambda t: -os.path.getsize(t[0]))
    images = {}
    for verdict, img in run_parallel(_survey_task, tasks, jobs, chunksize=1):
        verdicts.append(verdict)
        if img is not None:
            w, h, data = img
            images[verdict["path"]] = Image.frombytes("RGB", (w, h), data)
    updated = dict(cache, **{_cache_key(v["path"]): v for v in verdicts})
    if updated != cache:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(updated, indent=1, sort_keys=True))
            os.replace(tmp, cache_path)
        except OSError:
            pass  # the cache is only an optimisation
    verdicts.sort(key=lambda v: v["path"])
    return verdicts, images


# --------------------------------------------------------------------------------------------
# Per-image generation (runs in worker processes)
# --------------------------------------------------------------------------------------------

# Worker globals. With the fork start method the parent fills _SOURCES before creating the pool,
# so workers share the decoded photos copy-on-write; otherwise each worker decodes them lazily.
_SOURCES: dict[str, Image.Image] = {}
_CFG: dict = {}


def _worker_init(cfg: dict) -> None:
    _CFG.update(cfg)


def _source(path: str) -> Image.Image:
    im = _SOURCES.get(path)
    if im is None:
        im = _SOURCES[path] = load_source(path)
    return im


def _crop_box(w: int, h: int, out_aspect: float, area: float, fx: float, fy: float):
    """A crop of `area` (fraction of the photo) whose aspect is as close to out_aspect as fits;
    fx, fy in [0, 1] place it. Returns a float box so offsets are sub-pixel."""
    src_aspect = w / h
    aspect = min(max(out_aspect, area * src_aspect), src_aspect / area)
    cw = min(w, math.sqrt(area * w * h * aspect))
    ch = min(h, math.sqrt(area * w * h / aspect))
    x0 = (w - cw) * fx
    y0 = (h - ch) * fy
    return (x0, y0, x0 + cw, y0 + ch)


def _max_area(src_aspect: float, out_aspect: float) -> float:
    """Largest crop fraction whose aspect stays within MAX_STRETCH of the output's (never below
    MIN_CROP_AREA: keeping most of the photo matters more than a little stretch)."""
    r = min(1.0, out_aspect * MAX_STRETCH / src_aspect, src_aspect * MAX_STRETCH / out_aspect)
    return max(MIN_CROP_AREA, r)


def _jitter_lut(rng: np.random.Generator) -> list[int]:
    """Mild exposure/white-balance/gamma change, like differently processed photos of a scene."""
    gain = rng.uniform(0.92, 1.08) * rng.uniform(0.95, 1.05, size=3)
    gamma = rng.uniform(0.9, 1.1)
    x = (np.arange(256) / 255.0) ** gamma
    lut = np.clip(np.rint(255.0 * x[None, :] * gain[:, None]), 0, 255).astype(np.uint8)
    return lut.ravel().tolist()


def _encode_to_target(im: Image.Image, target: float) -> tuple[bytes, float, int]:
    """Pick the JPEG quality in [Q_MIN, Q_MAX] whose bits/pixel is closest to target, preferring
    results inside [BPP_MIN, BPP_MAX]. Size grows monotonically with quality, so a binary search
    for the largest q at or under the target, then q vs q+1, finds it in ~5 encodes (<1 ms each)."""
    px = im.width * im.height
    enc: dict[int, bytes] = {}

    def bpp(q: int) -> float:
        if q not in enc:
            enc[q] = jpeg_bytes(im, q)
        return len(enc[q]) * 8 / px

    lo, hi = Q_MIN, Q_MAX
    if bpp(lo) <= target:
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if bpp(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
    candidates = [lo] + ([lo + 1] if lo < Q_MAX else [])

    def badness(q: int) -> tuple[float, float]:
        b = bpp(q)
        return (max(BPP_MIN - b, b - BPP_MAX, 0.0), abs(b - target))

    q = min(candidates, key=badness)
    return enc[q], bpp(q), q


def make_image(index: int) -> tuple[int, int, int, int, float]:
    """Generate image `index`, write it, return (index, bytes, width, height, bpp).
    All randomness comes from (seed, index), so the result is independent of scheduling."""
    rng = np.random.default_rng([_CFG["seed"], index])
    sources = _CFG["sources"]
    out_w = int(rng.integers(WIDTH_RANGE[0], WIDTH_RANGE[1] + 1))
    out_h = int(rng.integers(HEIGHT_RANGE[0], HEIGHT_RANGE[1] + 1))
    out_aspect = out_w / out_h
    target = rng.uniform(*BPP_TARGET_RANGE)
    lut = _jitter_lut(rng)
    flip = rng.random() < 0.5

    best = None
    for attempt in range(MAX_ATTEMPTS):
        src = _source(sources[int(rng.integers(len(sources)))])
        max_area = _max_area(src.width / src.height, out_aspect)
        # First try a random large crop; if it is too smooth to reach BPP_MIN even at Q_MAX,
        # retry with the largest crop (most detail per output pixel), possibly of another photo.
        area = rng.uniform(MIN_CROP_AREA, max_area) if attempt == 0 else max_area
        box = _crop_box(src.width, src.height, out_aspect, area, rng.random(), rng.random())
        im = src.resize((out_w, out_h), Image.LANCZOS, box=box).point(lut)
        if flip:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        data, bpp, _q = _encode_to_target(im, target)
        if best is None or bpp > best[1]:
            best = (data, bpp)
        if bpp >= BPP_MIN:
            break
    data, bpp = best

    rel = image_relpath(index, _CFG["classes"])
    with open(os.path.join(_CFG["out"], rel), "wb") as f:
        f.write(data)
    return index, len(data), out_w, out_h, bpp


# --------------------------------------------------------------------------------------------
# Output directory management
# --------------------------------------------------------------------------------------------


def stamp_path(out: Path) -> Path:
    """The stamp sits beside OUT, not inside it, so OUT holds nothing but the image tree (a file
    at its top level would make it a tree that `stoker pack` does not label like ImageFolder)."""
    return out.parent / f".{out.name}{STAMP_NAME}"


def read_stamp(out: Path) -> dict | None:
    try:
        return json.loads(stamp_path(out).read_text())
    except (OSError, ValueError):
        return None


def write_stamp(out: Path, stamp: dict) -> None:
    tmp = stamp_path(out).with_name(stamp_path(out).name + ".tmp")
    tmp.write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, stamp_path(out))


def tree_matches(out: Path, images: int, classes: int, total_bytes: int) -> bool:
    """True iff OUT holds exactly the expected files (names) with the recorded total size."""
    expected: dict[str, set[str]] = {class_name(c): set() for c in range(classes)}
    for i in range(images):
        cls, name = image_relpath(i, classes).split("/")
        expected[cls].add(name)
    top = {e.name for e in os.scandir(out)} - {STAMP_NAME}
    if top != set(expected):
        return False
    size = 0
    for cls, names in expected.items():
        entries = list(os.scandir(out / cls))
        if {e.name for e in entries} != names:
            return False
        size += sum(e.stat().st_size for e in entries)
    return size == total_bytes


def clear_previous(out: Path) -> None:
    """Remove a previous run's output. Only called when OUT carries our stamp; anything we did
    not create is left alone and makes us refuse to write."""
    for e in os.scandir(out):
        if e.is_dir(follow_symlinks=False) and CLASS_DIR_RE.fullmatch(e.name):
            shutil.rmtree(e.path)
    foreign = sorted({e.name for e in os.scandir(out)} - {STAMP_NAME})
    if foreign:
        die(f"{out} contains files this script did not create ({', '.join(foreign[:5])}); "
            "choose an empty or new directory")


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def run_parallel(fn, items, jobs: int, chunksize: int, cfg: dict | None = None):
    """imap_unordered over a fork pool (workers inherit _SOURCES for free); in-process for
    --jobs 1, which also keeps tracebacks readable when debugging."""
    if jobs == 1 or len(items) <= 1:
        if cfg is not None:
            _worker_init(cfg)
        yield from map(fn, items)
        return
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    init_args = {} if cfg is None else {"initializer": _worker_init, "initargs": (cfg,)}
    with ctx.Pool(min(jobs, len(items)), **init_args) as pool:
        yield from pool.imap_unordered(fn, items, chunksize=chunksize)


def die(msg: str) -> None:
    print(f"make_sample_data: error: {msg}", file=sys.stderr)
    sys.exit(2)


def format_summary(s: dict) -> str:
    return (
        f"sample data: {s['images']} images, {s['classes']} classes, "
        f"{s['total_bytes']} bytes total, mean {s['mean_bytes'] / 1000:.1f} kB/image, "
        f"mean {s['mean_width']:.0f}x{s['mean_height']:.0f} px, "
        f"mean {s['mean_bpp']:.2f} bits/pixel "
        f"({'generated in %.1f s' % s['seconds'] if s['generated'] else 'up to date'}) "
        f"-> {s['out']}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Generate an ImageNet-like JPEG tree (OUT/<class>/<class>_<n>.JPEG) from "
        f"real photographs (Debian packages: {SOURCE_PACKAGES}).")
    p.add_argument("out", type=Path, help="output directory (created if missing)")
    p.add_argument("--images", type=int, required=True, help="number of images")
    p.add_argument("--classes", type=int, default=None,
                   help=f"number of class directories (default: min({DEFAULT_CLASSES}, images))")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: CPU count); does not affect the output")
    p.add_argument("--source-dir", action="append", default=None, metavar="DIR",
                   help=f"directory to take photos from (repeatable; default: {' '.join(SEARCH_DIRS)})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list accepted/rejected source photos on stderr")
    a = p.parse_args(argv)
    if a.images < 1:
        p.error("--images must be >= 1")
    if a.classes is None:
        a.classes = min(DEFAULT_CLASSES, a.images)
    if not 1 <= a.classes <= a.images:
        p.error("--classes must be between 1 and --images (empty classes break ImageFolder)")
    if a.jobs < 1:
        p.error("--jobs must be >= 1")
    if a.seed < 0:
        p.error("--seed must be >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    t0 = time.monotonic()
    out: Path = a.out.resolve()
    dirs = a.source_dir or list(SEARCH_DIRS)

    candidates = find_candidates(dirs)
    params = {"images": a.images, "classes": a.classes, "seed": a.seed}
    identity = {"generator": GENERATOR, "pillow": PIL.__version__, "params": params,
                "sources": fingerprint(candidates)}

    stamp = read_stamp(out) if out.is_dir() else None
    if (stamp and stamp.get("complete")
            and {k: stamp.get(k) for k in identity} == identity
            and tree_matches(out, a.images, a.classes, stamp["summary"]["total_bytes"])):
        summary = dict(stamp["summary"], out=str(out), generated=False,
                       seconds=round(time.monotonic() - t0, 3))
        print(json.dumps(summary) if a.json else format_summary(summary))
        return 0

    # Validate OUT before spending time on sources.
    if out.exists():
        if not out.is_dir():
            die(f"{out} exists and is not a directory")
        if stamp is not None:
            clear_previous(out)
        elif any(os.scandir(out)):
            die(f"{out} is not empty and was not created by this script; "
                "choose an empty or new directory")

    verdicts, images = survey_sources(candidates, a.jobs)
    if a.verbose:
        for v in verdicts:
            extra = "" if "bpp_q90" not in v else f" [{v['bpp_q90']:.2f} bpp@q90, {v['bpp_q95']:.2f} bpp@q95]"
            print(f"  {'ACCEPT' if v['ok'] else 'reject'} {v['path']}: {v['reason']}{extra}",
                  file=sys.stderr)
    sources = sorted(images)
    if not sources:
        die(f"no usable source photographs found in {', '.join(dirs)} "
            f"({len(candidates)} image files examined). Install the Debian packages with: "
            f"sudo apt-get install {SOURCE_PACKAGES}  (or run: bash scripts/setup)")

    out.mkdir(parents=True, exist_ok=True)
    write_stamp(out, dict(identity, complete=False))  # marks OUT as ours if we are interrupted
    for c in range(a.classes):
        (out / class_name(c)).mkdir(exist_ok=True)

    cfg = {"seed": a.seed, "classes": a.classes, "out": str(out), "sources": sources}
    _SOURCES.update(images)  # inherited by forked workers
    n = a.images
    sizes = np.zeros(n, dtype=np.int64)
    dims = np.zeros((n, 2), dtype=np.int64)
    bpps = np.zeros(n, dtype=np.float64)
    for i, nbytes, w, h, bpp in run_parallel(make_image, range(n), a.jobs, chunksize=8, cfg=cfg):
        sizes[i], dims[i], bpps[i] = nbytes, (w, h), bpp

    summary = {
        "images": n,
        "classes": a.classes,
        "total_bytes": int(sizes.sum()),
        "mean_bytes": float(sizes.mean()),
        "mean_width": float(dims[:, 0].mean()),
        "mean_height": float(dims[:, 1].mean()),
        "mean_bpp": float(bpps.mean()),
        "min_bpp": float(bpps.min()),
        "max_bpp": float(bpps.max()),
        "sources": sources,
    }
    write_stamp(out, dict(identity, complete=True, summary=summary))
    summary = dict(summary, out=str(out), generated=True, seconds=round(time.monotonic() - t0, 3))
    print(json.dumps(summary) if a.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
