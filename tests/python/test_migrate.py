"""MDS and LitData datasets into column datasets (issue 40): datasets written by the real
mosaicml-streaming and litdata packages (tests/migrate/write_peers.py, in the torchvision venv)
are converted with stoker.from_mds / stoker.from_litdata and `python -m stoker._pack_migrate`,
and every sample is compared with what was written. Bad input: a corrupted or truncated file
(an error naming it, nothing published), pickles (refused, saying how to allow them), a
directory that is neither format."""
from __future__ import annotations

import io
import json
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import stoker
from conftest import STOKER

REPO = Path(__file__).resolve().parents[2]
WRITE_PEERS = REPO / "tests" / "migrate" / "write_peers.py"

MDS_SMALL = {"a": "ndarray:uint8", "n": "int", "s": "str"}
LIT_MEDIA = {"caption": "str", "emb": "ndarray:float32", "flag": "int", "ids": "ndarray:int64",
             "image": "jpeg", "label": "int", "mat": "ndarray", "pil": "ndarray:uint8",
             "raw": "bytes", "score": "float:nan", "t": "ndarray", "tags": "json"}
LIT_ROWS = {"image": "jpeg", "label": "int", "meta_a": "int", "meta_tags": "json",
            "score": "float:nan?", "text": "str"}
# Each peer dataset: the columns stoker must infer for it.
MDS = {
    "mds_all": {"arr": "ndarray", "arr16": "ndarray:int16", "caption": "str",
                "emb": "ndarray:float32:4", "f16": "float:nan", "f32": "float:nan",
                "f64": "float:nan", "gray": "ndarray:uint8", "i32": "int", "i8": "int",
                "image": "jpeg", "label": "int", "meta": "json", "pil": "ndarray:uint8",
                "png": "png", "raw": "bytes", "sd": "str", "sf": "float:nan", "si": "int",
                "u16": "int", "u64": "int"},
    "mds_zstd": {"caption": "str", "emb": "ndarray:float32:4", "image": "jpeg", "label": "int"},
    **{f"mds_{codec}": MDS_SMALL for codec in ("gz", "bz2", "br", "snappy", "zstd_7")},
}
LITDATA = {
    **{name: LIT_MEDIA for name in ("lit_media", "lit_media_zstd", "lit_media_chunk",
                                    "lit_media_sample")},
    **{name: LIT_ROWS for name in ("lit_rows", "lit_rows_zstd", "lit_rows_items")},
    "lit_nested": {"pic": "ndarray:uint8", **{k: "json" for k in (
        "strs", "ints", "floats", "bools", "recs", "mix", "empty")}},
    "lit_tuple": {"0": "ndarray:int16", "1": "float:nan", "2": "int", "3": "str"},
    "lit_leaf": {"data": "str"},
    "lit_tokens": {"tokens": "tokens"},  # int32, the default, is not written in the schema
    "lit_tokens16": {"tokens": "tokens:uint16"},
}


def _peers_python() -> str | None:
    """An interpreter with mosaicml-streaming and litdata: STOKER_TORCHVISION_PYTHON, the
    repository's .venv-torchvision (scripts/test installs them there, beside torchvision,
    which they need and which does not load beside .venv's torch), or this one."""
    for python in (os.environ.get("STOKER_TORCHVISION_PYTHON", ""),
                   str(REPO / ".venv-torchvision" / "bin" / "python"), sys.executable):
        if python and os.path.exists(python) and subprocess.run(
                [python, "-c", "import streaming, litdata"], capture_output=True).returncode == 0:
            return python
    return None


@pytest.fixture(scope="module")
def peers(tmp_path_factory) -> tuple[Path, dict[str, list[dict]]]:
    python = _peers_python()
    if python is None:
        if os.environ.get("STOKER_REQUIRE_TORCHVISION", "") not in ("", "0"):
            pytest.fail("STOKER_REQUIRE_TORCHVISION is set but no interpreter imports streaming "
                        "and litdata (set STOKER_TORCHVISION_PYTHON)")
        pytest.skip("mosaicml-streaming and litdata are not installed (set "
                    "STOKER_TORCHVISION_PYTHON)")
    out = tmp_path_factory.mktemp("peers")
    proc = subprocess.run([python, str(WRITE_PEERS), str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "expected.pkl", "rb") as f:
        return out, pickle.load(f)


def assert_same(got, want, where: str) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), where
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), where
    else:
        assert got == want and type(got) is (int if isinstance(want, bool) else type(want)), \
            f"{where}: {got!r} != {want!r}"


def assert_dataset(uri, columns: dict[str, str], expected: list[dict]) -> None:
    """Every sample of the stoker dataset at `uri` is the expected one, in order."""
    ds = stoker.Dataset(uri)
    assert ds.columns == columns
    assert len(ds) == len(expected)
    for i, want in enumerate(expected):
        got = ds[i]
        assert set(got) == set(columns), i
        for name in columns:
            assert_same(got[name], want[name], f"{uri} sample {i} column {name}")


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("name", sorted(MDS))
def test_mds_datasets_convert_sample_for_sample(peers, tmp_path, name):
    src, expected = peers
    out = tmp_path / "out.stoker"
    summary = stoker.from_mds(src / name, out, progress=False)
    assert summary["samples"] == len(expected[name])
    assert_dataset(out, MDS[name], expected[name])


@pytest.mark.slow
@pytest.mark.system
@pytest.mark.parametrize("name", sorted(LITDATA))
def test_litdata_datasets_convert_sample_for_sample(peers, tmp_path, name):
    src, expected = peers
    out = tmp_path / "out.stoker"
    summary = stoker.from_litdata(src / name, out, progress=False)
    assert summary["samples"] == len(expected[name])
    assert_dataset(out, LITDATA[name], expected[name])


def pack(*args, cli: bool = False) -> subprocess.CompletedProcess:
    """`python -m stoker._pack_migrate SRC_DIR DST ...`, or with cli=True `stoker pack SRC_DIR
    DST ...`, which runs that module for such a directory (tools/cmd_pack.cc)."""
    program = [STOKER, "pack"] if cli else [sys.executable, "-m", "stoker._pack_migrate"]
    proc = subprocess.run([*program, *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    assert "Warning" not in proc.stderr  # e.g. runpy's "found in sys.modules" RuntimeWarning
    return proc


@pytest.mark.slow
@pytest.mark.system
def test_pack_module_converts_either_format(peers, tmp_path):
    src, expected = peers
    for name, columns in (("mds_zstd", MDS["mds_zstd"]), ("lit_media_zstd", LIT_MEDIA)):
        proc = pack(src / name, tmp_path / name, "--json", cli=True)  # the command users run
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["samples"] == len(expected[name])
        assert_dataset(tmp_path / name, columns, expected[name])
    # Options are stoker pack's: a PIL column as PNG, a label column, an append.
    out = tmp_path / "png.stoker"
    proc = pack(src / "mds_all", out, "-q", "--columns", "pil=png", "--label", "i8")
    assert proc.returncode == 1 and "column 'i8': label -1 is outside" in proc.stderr
    proc = pack(src / "mds_all", out, "-q", "--columns", "pil=png")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    proc = pack(src / "mds_all", out, "-q", "--columns", "pil=png", "--append")
    assert proc.returncode == 0, proc.stderr
    from PIL import Image
    ds = stoker.Dataset(out)
    assert ds.columns["pil"] == "png" and len(ds) == 2 * len(expected["mds_all"])
    for i in range(len(ds)):
        pixels = np.asarray(Image.open(io.BytesIO(ds[i]["pil"])))
        assert np.array_equal(pixels, expected["mds_all"][i % 12]["pil"]), i


def flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def assert_nothing_published(out: Path) -> None:
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(out)


@pytest.mark.slow
@pytest.mark.system
def test_damaged_files_stop_the_conversion_naming_them(peers, tmp_path):
    src, _ = peers
    # A flipped byte in a zstd shard: its hashes (sha1, xxh64) differ from the index's.
    shutil.copytree(src / "mds_zstd", tmp_path / "mds")
    shard = sorted((tmp_path / "mds").glob("shard.*.mds.zstd"))[3]
    flip_byte(shard, shard.stat().st_size // 2)
    out = tmp_path / "out.stoker"
    with pytest.raises(stoker.CorruptionError, match=shard.name):
        stoker.from_mds(tmp_path / "mds", out, progress=False)
    assert_nothing_published(out)
    proc = pack(tmp_path / "mds", out, "--json")
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 1 and error["code"] == "Corruption"
    assert shard.name in error["message"]
    assert_nothing_published(out)
    # A shard without hashes, cut short: its size differs from the index's.
    shutil.copytree(src / "mds_all", tmp_path / "all")
    shard = sorted((tmp_path / "all").glob("shard.*.mds"))[1]
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(stoker.CorruptionError, match=shard.name):
        stoker.from_mds(tmp_path / "all", out, progress=False)
    # LitData keeps no checksums, but a chunk cut short, or an item whose leaves do not add up,
    # is caught by its sizes and offsets.
    for name in ("lit_media", "lit_media_zstd", "lit_rows"):
        shutil.copytree(src / name, tmp_path / name)
        chunk = sorted((tmp_path / name).glob("chunk-*.bin"))[1]
        chunk.write_bytes(chunk.read_bytes()[:-3])
        with pytest.raises(stoker.CorruptionError, match=chunk.name):
            stoker.from_litdata(tmp_path / name, out, progress=False)
    shutil.copytree(src / "lit_media", tmp_path / "sizes")
    chunk = sorted((tmp_path / "sizes").glob("chunk-*.bin"))[2]
    n = struct.unpack_from("<I", chunk.read_bytes())[0]
    flip_byte(chunk, 4 + 4 * (n + 1) + 4)  # the second leaf's size in the first item
    with pytest.raises(stoker.CorruptionError, match=f"{chunk.name}: item 0"):
        stoker.from_litdata(tmp_path / "sizes", out, progress=False)
    assert_nothing_published(out)


@pytest.mark.slow
@pytest.mark.system
def test_pickles_are_refused_unless_allowed(peers, tmp_path):
    src, expected = peers
    for name, convert in (("mds_pkl", stoker.from_mds), ("lit_pickle", stoker.from_litdata)):
        with pytest.raises(ValueError, match=r"column 'obj' holds Python pickles.*allow_pickle"
                                             r"=True.*columns=\{'obj': 'bytes'\}"):
            convert(src / name, tmp_path / name, progress=False)
        assert_nothing_published(tmp_path / name)
        convert(src / name, tmp_path / name, columns={"obj": "bytes"}, progress=False)
        ds = stoker.Dataset(tmp_path / name)
        for i, want in enumerate(expected[name]):  # the pickles' bytes, never unpickled
            assert ds[i] == {"obj": want["obj_bytes"], "n": want["n"]}
    proc = pack(src / "mds_pkl", tmp_path / "cli", "-q")
    assert proc.returncode == 1 and "--allow-pickle" in proc.stderr
    proc = pack(src / "mds_pkl", tmp_path / "cli", "-q", "--allow-pickle", cli=True)
    assert proc.returncode == 0, proc.stderr
    assert_dataset(tmp_path / "cli", {"n": "int", "obj": "json"},
                   [{"n": w["n"], "obj": w["obj"]} for w in expected["mds_pkl"]])


# ---- without the peers: MDS shards written here, by the layout the peers' tests confirm ----

def write_mds(root: Path, columns: dict[str, str], rows: list[dict[str, bytes]]) -> None:
    """An uncompressed MDS dataset of one shard; `rows` hold each column's encoded bytes
    (variable-size encodings only, so each gets a length)."""
    names = sorted(columns)
    samples = [struct.pack(f"<{len(names)}I", *(len(r[n]) for n in names))
               + b"".join(r[n] for n in names) for r in rows]
    head = 4 + 4 * (len(rows) + 1)
    offsets = np.cumsum([head] + [len(s) for s in samples]).tolist()
    data = struct.pack(f"<{len(offsets) + 1}I", len(rows), *offsets) + b"".join(samples)
    root.mkdir(parents=True)
    (root / "shard.00000.mds").write_bytes(data)
    shard = {"column_encodings": [columns[n] for n in names], "column_names": names,
             "column_sizes": [None] * len(names), "compression": None, "format": "mds",
             "hashes": [], "raw_data": {"basename": "shard.00000.mds", "bytes": len(data),
                                        "hashes": {}},
             "samples": len(rows), "size_limit": None, "version": 2, "zip_data": None}
    (root / "index.json").write_text(json.dumps({"version": 2, "shards": [shard]}))


JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 12


def test_a_bytes_column_of_images_must_stay_images(tmp_path):
    write_mds(tmp_path / "src", {"image": "bytes", "caption": "str"},
              [{"image": JPEG, "caption": b"a"}, {"image": b"GIF89a", "caption": b"b"}])
    with pytest.raises(ValueError, match=r"sample 1, column 'image'.*columns=\{'image': "
                                         r"'bytes'\}"):
        stoker.from_mds(tmp_path / "src", tmp_path / "a", progress=False)
    assert_nothing_published(tmp_path / "a")
    stoker.from_mds(tmp_path / "src", tmp_path / "b", columns={"image": "bytes"}, progress=False)
    assert stoker.Dataset(tmp_path / "b")[1] == {"image": b"GIF89a", "caption": "b"}


def test_directories_that_are_neither_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        stoker.from_mds(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="neither an MDS nor a LitData"):
        stoker.from_litdata(tmp_path / "empty", tmp_path / "out")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "index.json").write_text('{"files": []}')
    with pytest.raises(ValueError, match="neither an MDS index"):
        stoker.from_mds(tmp_path / "other", tmp_path / "out")
    write_mds(tmp_path / "mds", {"s": "str"}, [{"s": b"x"}])
    with pytest.raises(ValueError, match="use stoker.from_mds"):
        stoker.from_litdata(tmp_path / "mds", tmp_path / "out")
    index = json.loads((tmp_path / "mds" / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = "../../etc/passwd"
    (tmp_path / "mds" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="is not inside"):
        stoker.from_mds(tmp_path / "mds", tmp_path / "out")
    with pytest.raises(ValueError, match="'nope' is not a column"):
        stoker.from_mds(tmp_path / "mds", tmp_path / "out", columns={"nope": "int"})
    # The command line: 1 for a failed pack (with the reason), 2 for a bad command line.
    proc = pack(tmp_path / "empty", tmp_path / "out")
    assert proc.returncode == 1 and "neither an MDS nor a LitData" in proc.stderr
    proc = pack(tmp_path / "other", tmp_path / "out", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["code"] == "InvalidArgument"
    assert pack(tmp_path / "empty").returncode == 2
    assert pack(tmp_path / "mds", tmp_path / "a", tmp_path / "b").returncode == 2
    assert pack(tmp_path / "mds", tmp_path / "a", "--columns", "s=text").returncode == 2
