"""End-to-end tests of the installed `stoker` CLI: pack, ls, stat, cat, info, verify."""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import chunk_files, dataset_contents, make_tree, metadata_files, run_on_pty, write_tar

import stoker

EXIT_ERROR, EXIT_CORRUPT = 1, 3


@pytest.fixture
def packed(tmp_path, tree, stoker_cli):
    src, files = tree
    dst = tmp_path / "ds"
    proc = stoker_cli("pack", src, dst, "--chunk-size", "64KiB", "--json", check=True)
    return dst, files, json.loads(proc.stdout)


def test_pack_json_summary(packed):
    dst, files, summary = packed
    assert summary["version"] == 1
    assert summary["files"] == summary["files_added"] == summary["samples"] == len(files)
    assert summary["bytes"] == sum(map(len, files.values()))
    assert summary["classes"] == 3
    assert summary["chunks"] == summary["chunks_added"] == len(chunk_files(dst)) > 1


def test_pack_human_summary_and_quiet(tmp_path, tree, stoker_cli):
    src, files = tree
    proc = stoker_cli("pack", src, tmp_path / "a", check=True)
    assert f"packed {len(files)} files" in proc.stdout and "version 1" in proc.stdout
    proc = stoker_cli("pack", "-q", src, tmp_path / "b", check=True)
    assert proc.stdout == "" and proc.stderr == ""
    # Counts of one read as one ("1 chunks" was printed before).
    one = tmp_path / "one" / "cat"
    one.mkdir(parents=True)
    (one / "x.jpg").write_bytes(b"x")
    proc = stoker_cli("pack", tmp_path / "one", tmp_path / "c", check=True)
    assert "packed 1 file (" in proc.stdout and "1 chunk added (1 total), 1 sample, 1 class," \
        in proc.stdout, proc.stdout
    proc = stoker_cli("verify", tmp_path / "c", check=True)
    assert "1 file in 1 chunk" in proc.stdout, proc.stdout


def test_ls(packed, stoker_cli):
    dst, files, _ = packed
    assert stoker_cli("ls", dst, check=True).stdout.split() == ["class00/", "class01/", "class02/"]
    direct = sorted(p.split("/")[1] for p in files
                    if p.startswith("class01/") and p.count("/") == 1)
    listing = json.loads(stoker_cli("ls", dst, "class01", "--json", check=True).stdout)
    assert listing[0] == {"name": "nested", "type": "dir", "size": 0}
    assert [e["name"] for e in listing[1:]] == direct
    assert all(e["type"] == "file" and e["size"] == len(files["class01/" + e["name"]])
               for e in listing[1:])
    long = stoker_cli("ls", "-l", dst, "class01", check=True).stdout.splitlines()
    assert long[0].startswith("d ") and long[0].endswith("nested/")
    assert any(line.split()[1] == str(len(files["class01/" + direct[0]])) for line in long)
    missing = stoker_cli("ls", dst, "no/such/dir")
    assert missing.returncode == EXIT_ERROR and "no/such/dir" in missing.stderr


def test_stat_and_cat(packed, stoker_cli):
    dst, files, _ = packed
    for path in sorted(files)[::7]:
        st = json.loads(stoker_cli("stat", dst, path, "--json", check=True).stdout)
        assert st["path"] == path and st["size"] == len(files[path])
        assert st["class"] == path.split("/")[0] and st["label"] == int(path[5:7])
        assert stoker_cli("cat", dst, path, binary=True, check=True).stdout == files[path]
    human = stoker_cli("stat", dst, "class02/f0002.jpg", check=True).stdout
    assert "path:" in human and "class02/f0002.jpg" in human
    d = json.loads(stoker_cli("stat", dst, "class00/nested", "--json", check=True).stdout)
    assert d == {"path": "class00/nested", "type": "dir"}
    for cmd in ("stat", "cat"):
        proc = stoker_cli(cmd, dst, "class00/missing.jpg")
        assert proc.returncode == EXIT_ERROR and "class00/missing.jpg" in proc.stderr


def test_info(packed, stoker_cli):
    dst, files, summary = packed
    info = json.loads(stoker_cli("info", dst, "--json", check=True).stdout)
    assert info["version"] == 1 and info["files"] == len(files) and info["classes"] == 3
    assert info["bytes"] == sum(map(len, files.values()))
    assert info["chunks"] == summary["chunks"]
    assert info["chunk_bytes"] == sum(len(b) for b in chunk_files(dst).values())
    assert info["labels"] == "from first-level directories"
    human = stoker_cli("info", dst, check=True).stdout
    assert "version    1" in human and f"files      {len(files)}" in human


def test_verify_ok(packed, stoker_cli):
    dst, files, summary = packed
    report = json.loads(stoker_cli("verify", dst, "--json", check=True).stdout)
    assert report["ok"] and report["files_checked"] == len(files)
    assert report["chunks_checked"] == summary["chunks"]
    assert report["corrupt_files"] == report["corrupt_chunks"] == report["problems"] == []
    assert "checked: OK" in stoker_cli("verify", dst, check=True).stdout


def test_verify_names_corrupt_file_and_chunk(packed, stoker_cli):
    dst, files, _ = packed
    victim = max(files, key=lambda p: len(files[p]))
    st = json.loads(stoker_cli("stat", dst, victim, "--json", check=True).stdout)
    chunk = f"chunks/{st['chunk']}.chunk"
    with open(dst / chunk, "r+b") as f:  # flip one bit in the middle of the victim's bytes
        f.seek(st["offset"] + st["size"] // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x01]))
    proc = stoker_cli("verify", dst)
    assert proc.returncode == EXIT_CORRUPT
    assert f"CORRUPT file   {victim}" in proc.stdout and chunk in proc.stdout
    assert any(line.startswith("CORRUPT chunk") and chunk in line
               for line in proc.stdout.splitlines())
    proc = stoker_cli("verify", dst, "--json")
    assert proc.returncode == EXIT_CORRUPT
    report = json.loads(proc.stdout)
    assert not report["ok"]
    assert [f["path"] for f in report["corrupt_files"]] == [victim]
    assert any(chunk in f["message"] for f in report["corrupt_files"])
    assert len(report["corrupt_chunks"]) == 1 and chunk in report["corrupt_chunks"][0]["path"]
    # cat refuses to hand out the bad bytes.
    cat = stoker_cli("cat", dst, victim, binary=True)
    assert cat.returncode == EXIT_CORRUPT and cat.stdout == b""
    assert victim.encode() in cat.stderr
    # Other files are still served.
    other = next(p for p in files if p != victim and files[p])
    assert stoker_cli("cat", dst, other, binary=True, check=True).stdout == files[other]


def assert_rejected(proc, name: str, dst: Path, before: dict | None = None):
    assert proc.returncode == EXIT_ERROR, proc.stderr
    assert name in proc.stderr, proc.stderr
    assert proc.stderr.startswith("stoker pack: ")
    if before is None:  # no version published, no metadata or chunk left behind
        assert metadata_files(dst) == {"versions": {}, "segments": {}}
        assert chunk_files(dst) == {}
    else:  # appending: the old version stays the newest, nothing is added
        assert metadata_files(dst) == before["metadata"]
        assert chunk_files(dst) == before["chunks"]


def test_hostile_symlink_escaping_source(tmp_path, tree, stoker_cli):
    src, _ = tree
    (tmp_path / "outside.jpg").write_bytes(b"secret")
    (src / "class01" / "escape.jpg").symlink_to(tmp_path / "outside.jpg")
    proc = stoker_cli("pack", src, tmp_path / "ds")
    assert_rejected(proc, "escape.jpg", tmp_path / "ds")
    assert "escapes" in proc.stderr


def test_hostile_fifo(tmp_path, tree, stoker_cli):
    src, _ = tree
    os.mkfifo(src / "class02" / "pipe.jpg")
    proc = stoker_cli("pack", src, tmp_path / "ds", timeout=60)  # must not block on the FIFO
    assert_rejected(proc, "pipe.jpg", tmp_path / "ds")
    assert "FIFO" in proc.stderr


@pytest.mark.parametrize("member", ["/etc/evil.jpg", "../evil.jpg", "a/../../evil.jpg"])
def test_hostile_tar_member_names(tmp_path, stoker_cli, member):
    shard = tmp_path / "shard.tar"
    write_tar(shard, {"ok/x.jpg": b"fine", member: b"evil", "ok/y.jpg": b"fine"})
    proc = stoker_cli("pack", shard, tmp_path / "ds")
    assert_rejected(proc, member, tmp_path / "ds")
    assert str(shard) in proc.stderr


def test_a_member_that_declares_more_than_the_archive_holds(tmp_path, stoker_exe):
    # 10 bytes of a member that declares 60 MiB, gzipped to ~100 bytes: the pack fails naming
    # it, and its memory follows the bytes that exist, not the declared size (it used to
    # allocate and zero all 60 MiB first).
    info = tarfile.TarInfo("s/big.jpg")
    info.size = 60 << 20
    shard = tmp_path / "liar.tar.gz"
    shard.write_bytes(gzip.compress(info.tobuf() + b"0123456789"))
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "print(p.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe, stoker_exe, "pack", str(shard),
                          str(tmp_path / "ds")], capture_output=True, text=True, timeout=120)
    first, stderr = out.stdout.split("\n", 1)
    rc, peak_kib = map(int, first.split())
    assert rc == 1 and "s/big.jpg" in stderr, stderr
    assert peak_kib < 40 * 1024, f"stoker pack peaked at {peak_kib} KiB"
    assert not (tmp_path / "ds" / "versions").exists()


def test_duplicate_member_across_shards(tmp_path, stoker_cli):
    write_tar(tmp_path / "0.tar", {"s/a.jpg": b"1" * 5000, "s/dup.jpg": b"first"})
    write_tar(tmp_path / "1.tar", {"s/b.jpg": b"2", "s/dup.jpg": b"second"})
    proc = stoker_cli("pack", tmp_path / "0.tar", tmp_path / "1.tar", tmp_path / "ds",
                      "--chunk-size", "4KiB")
    assert_rejected(proc, "s/dup.jpg", tmp_path / "ds")
    assert "duplicate" in proc.stderr


def test_webdataset_folder_packs_as_labelled_samples(tmp_path, stoker_cli):
    # key.jpg + key.cls as plain files, not in a tar: samples labelled by their .cls, as in a tar.
    src = tmp_path / "flat"
    src.mkdir()
    for i in range(6):
        (src / f"k{i}.jpg").write_bytes(b"jpeg %d" % i)
        (src / f"k{i}.cls").write_text(f"{i % 3}\n")
    stoker_cli("pack", src, tmp_path / "ds", check=True)
    info = json.loads(stoker_cli("info", "--json", tmp_path / "ds", check=True).stdout)
    assert (info["samples"], info["files"], info["classes"]) == (6, 12, 3)
    assert info["labels"] == "from .cls members"
    ds = stoker.Dataset(str(tmp_path / "ds"))
    assert sorted((key, label, members["jpg"]) for members, label, key in
                  (ds[i] for i in range(len(ds)))) == [
        (f"k{i}", i % 3, b"jpeg %d" % i) for i in range(6)]
    # --layout tree: a file per sample, no labels (the files are in the root).
    stoker_cli("pack", "--layout", "tree", src, tmp_path / "tree", check=True)
    info = json.loads(stoker_cli("info", "--json", tmp_path / "tree", check=True).stdout)
    assert (info["samples"], info["classes"]) == (12, 0)


def test_append_duplicate_leaves_version(packed, tmp_path, stoker_cli):
    dst, files, _ = packed
    before = {"metadata": metadata_files(dst), "chunks": chunk_files(dst)}
    assert list(before["metadata"]["versions"]) == [f"{1:016x}.version"]
    src2 = tmp_path / "src2"
    make_tree(src2, seed=7, classes=1, files_per_class=12, prefix="new-")
    victim = sorted(files)[0]
    (src2 / victim).parent.mkdir(parents=True, exist_ok=True)
    (src2 / victim).write_bytes(b"again")
    proc = stoker_cli("pack", "--append", "--chunk-size", "4KiB", src2, dst)
    assert_rejected(proc, victim, dst, before)
    assert "1 of the input's paths are already in the dataset (version 1)" in proc.stderr
    assert stoker.Dataset(str(dst)).version == 1


def test_pack_into_existing_dataset_refused(packed, tree, stoker_cli):
    dst, _, _ = packed
    before = {"metadata": metadata_files(dst), "chunks": chunk_files(dst)}
    proc = stoker_cli("pack", tree[0], dst)
    assert proc.returncode == EXIT_ERROR and "--append" in proc.stderr
    assert "already holds a dataset (version 1)" in proc.stderr
    assert metadata_files(dst) == before["metadata"]
    assert chunk_files(dst) == before["chunks"]


def test_append_keeps_old_chunks_byte_identical(packed, tmp_path, stoker_cli):
    dst, files, _ = packed
    old_chunks = chunk_files(dst)
    old_meta = metadata_files(dst)
    assert list(old_meta["versions"]) == [f"{1:016x}.version"] and len(old_meta["segments"]) == 1
    src2 = tmp_path / "src2"
    more = make_tree(src2, seed=77, classes=4, files_per_class=6, prefix="v2-")
    summary = json.loads(stoker_cli("pack", "--append", "--json", "--chunk-size", "64KiB",
                                    src2, dst, check=True).stdout)
    assert summary["version"] == 2 and summary["files_added"] == len(more)
    assert summary["files"] == len(files) + len(more)
    new_chunks = chunk_files(dst)
    assert {k: new_chunks[k] for k in old_chunks} == old_chunks
    assert len(new_chunks) == len(old_chunks) + summary["chunks_added"]
    # Version 1's record and segment stay byte-identical; the append added one of each.
    new_meta = metadata_files(dst)
    for kind in ("versions", "segments"):
        assert {k: new_meta[kind][k] for k in old_meta[kind]} == old_meta[kind], kind
        assert len(new_meta[kind]) == len(old_meta[kind]) + 1, kind
    assert sorted(new_meta["versions"]) == [f"{1:016x}.version", f"{2:016x}.version"]
    assert summary["segments"] == 2 and summary["classes_added"] == 1
    info = json.loads(stoker_cli("info", dst, "--json", check=True).stdout)
    assert info["version"] == 2 and info["classes"] == 4
    assert info["parent"] == 1 and info["segments"] == 2
    assert info["files"] == len(files) + len(more)
    # Version 1 stays readable, with its own files and their indices.
    v1 = stoker.Dataset(str(dst), version=1)
    assert v1.version == 1 and v1.num_files == len(v1) == len(files)
    assert dataset_contents(v1) == files
    v2 = stoker.Dataset(str(dst))
    assert v2.version == 2
    assert [v2.stat(i)["path"] for i in range(len(files))] == \
        [v1.stat(i)["path"] for i in range(len(files))]
    for path, data in [*files.items()][::9] + [*more.items()][::5]:
        assert stoker_cli("cat", dst, path, binary=True, check=True).stdout == data
    assert json.loads(stoker_cli("verify", dst, "--json", check=True).stdout)["ok"]


def test_progress_bar_only_on_a_tty(tmp_path, tree, stoker_exe, stoker_cli):
    src, files = tree
    rc, terminal = run_on_pty([stoker_exe, "pack", str(src), str(tmp_path / "a")])
    assert rc == 0
    assert "pack [" in terminal and f"/{len(files)} files" in terminal
    assert terminal.endswith("\r\x1b[2K")  # the bar clears its line when done
    rc, terminal = run_on_pty([stoker_exe, "verify", str(tmp_path / "a")])
    assert rc == 0 and "verify [" in terminal and "chunks" in terminal
    # Not a terminal, or --json / -q: no bar.
    proc = stoker_cli("pack", src, tmp_path / "b", check=True)
    assert proc.stderr == ""
    assert stoker_cli("verify", tmp_path / "b", check=True).stderr == ""
    for flag in ("--json", "-q"):
        rc, terminal = run_on_pty([stoker_exe, "pack", flag, str(src), str(tmp_path / flag)])
        assert rc == 0 and terminal == ""


def test_usage_errors(tmp_path, stoker_cli):
    assert stoker_cli("pack", tmp_path).returncode == 2  # SRC... DST: one path is not enough
    proc = stoker_cli("frobnicate")
    assert proc.returncode == 2 and "did you mean" not in proc.stderr
    assert "'frobnicate' is not a command (stoker --help lists them)" in proc.stderr
    proc = stoker_cli("pakc", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"] == {
        "code": "Usage", "message": "'pakc' is not a command; did you mean 'pack'?"}
    for typo, meant in (("pakc", "pack"), ("verfy", "verify"), ("compcat", "compact")):
        proc = stoker_cli(typo, tmp_path)
        assert proc.returncode == 2
        assert f"'{typo}' is not a command; did you mean '{meant}'?" in proc.stderr, proc.stderr
    proc = stoker_cli("pack", "--chunk-size", "big", tmp_path, tmp_path / "ds")
    assert proc.returncode == 2 and "chunk-size" in proc.stderr
    proc = stoker_cli("pack", "--part", "3/3", tmp_path, tmp_path / "ds")  # K counts from 0
    assert proc.returncode == 2 and "K must be below N" in proc.stderr, proc.stderr
    # The daemons' flags: checked, not metrics or a disk tier silently off.
    for command in (["serve", "--secret-file", tmp_path / "s", "--dataset", f"d={tmp_path}"],
                    ["node", "--job", "j", "--store", tmp_path], ["feed", "--job", "j"]):
        proc = stoker_cli(*command, "--metrics-port", "-5")
        assert proc.returncode == 2 and "not in range 0 to 65535" in proc.stderr, proc.stderr
    proc = stoker_cli("node", "--job", "j", "--store", tmp_path, "--disk-limit", "1G")
    assert proc.returncode == 2 and "--disk-limit requires --disk-dir" in proc.stderr
    proc = stoker_cli("feed", "--job", "j", "--threads", "5000")
    assert proc.returncode == 2 and "not in range 0 to 1024" in proc.stderr
    assert stoker_cli("--version", check=True).stdout.strip() == "stoker 0.1.0"
    proc = stoker_cli("info", tmp_path / "nothing")
    assert proc.returncode == EXIT_ERROR and "is not a stoker dataset (no versions/)" in proc.stderr


def test_a_report_that_cannot_be_written_fails(packed, stoker_exe):
    """`stoker verify --json ds > report.json` on a full disk: exit 1 and why, not an empty
    report and exit 0."""
    dst, _, _ = packed
    for args in (["verify", "--json", dst], ["ls", dst], ["info", dst]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([stoker_exe, *map(str, args)], stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
        assert proc.returncode == EXIT_ERROR, (args, proc.stderr)
        assert "writing the output failed: No space left on device" in proc.stderr


def test_numbers_that_cannot_be_are_usage_errors(packed, stoker_cli):
    """A negative count is not read as 2^64 - 1, and a range says what it wants."""
    dst, _, _ = packed
    for args, message in ((["verify", dst, "--version", "-1"], "'-1' is not a whole number >= 1"),
                          (["gc", dst, "--keep", "-1", "--dry-run"], "--keep: '-1'"),
                          (["ls", dst, "--version", "0"], "must be at least 1, not 0"),
                          (["shuffle-report", dst, "--batch-size", "0"], "must be at least 1")):
        proc = stoker_cli(*args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)


def test_pack_shuffled_order_mixes_classes_in_chunks(tmp_path, stoker_cli):
    """--order shuffled changes only where files land: same paths, bytes and labels, but chunks
    that mix classes, so chunk shuffle with W=1 mixes batches like a full shuffle."""
    import random as _random

    rng = _random.Random(3)
    src = tmp_path / "src"
    for c in range(8):
        for i in range(40):
            p = src / f"class{c}" / f"{i:03d}.bin"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(rng.randbytes(rng.randrange(500, 1500)))
    reports = {}
    for order in ("path", "shuffled"):
        dst = tmp_path / order
        stoker_cli("pack", src, dst, "--chunk-size", "8KiB", "--order", order, "-q", check=True)
        ds = stoker.Dataset(str(dst))
        for i in range(len(ds)):
            data, label, path = ds[i]
            assert data == (src / path).read_bytes()
            assert ds.classes[label] == path.split("/")[0]
        report = json.loads(stoker_cli("shuffle-report", dst, "--batch-size", "16", "--windows",
                                       "1", "--json", check=True).stdout)
        reports[order] = {("default" if r["loader_default"] else r["mode"]): r for r in report}
    assert stoker_cli("verify", tmp_path / "shuffled").returncode == 0
    path_w1 = reports["path"]["chunk"]["batch_distinct_classes"]
    shuffled_w1 = reports["shuffled"]["chunk"]["batch_distinct_classes"]
    full = reports["shuffled"]["full"]["batch_distinct_classes"]
    assert path_w1 < 3 < 0.8 * full < shuffled_w1
    # The loader's default reads the mixed dataset in whole chunks, the class-ordered one in
    # blocks (more, smaller reads) that mix classes nearly as well as a full shuffle.
    mixed, by_path = reports["shuffled"]["default"], reports["path"]["default"]
    assert mixed["block_bytes"] == 0
    assert 0 < by_path["block_bytes"] < 8192
    assert by_path["reads_per_epoch"] > reports["path"]["chunk"]["reads_per_epoch"]
    assert by_path["batch_distinct_classes"] > 0.85 * full
    assert by_path["expected_classes_per_batch"] >= 0.95 * by_path[
        "expected_full_shuffle_classes_per_batch"]


def test_pack_is_mixed_by_default(tmp_path, stoker_cli):
    """Without --order, a class-ordered tree and class-ordered tar shards land in chunks that
    mix classes; --order path keeps class order (and the CLI says which it did)."""
    import tarfile

    src = tmp_path / "src"
    shards = []
    for c in range(6):
        tar_path = tmp_path / f"shard-{c}.tar"
        shards.append(tar_path)
        with tarfile.open(tar_path, "w") as tar:
            for i in range(50):
                p = src / f"class{c}" / f"{i:03d}.bin"
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(bytes([c, i]) * 400)
                for name, data in ((f"{c}{i:03d}.bin", p.read_bytes()),
                                   (f"{c}{i:03d}.cls", str(c).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))

    def classes_per_chunk(dst):
        ds = stoker.Dataset(str(dst))
        per_chunk = {}
        for i in range(len(ds)):
            per_chunk.setdefault(ds.stat(ds.sample_files(i)[0])["chunk"], set()).add(ds[i][1])
        assert stoker_cli("verify", dst).returncode == 0
        return sum(len(v) for v in per_chunk.values()) / len(per_chunk)

    for name, inputs in (("tree", [src]), ("tar", shards)):
        stoker_cli("pack", *inputs, tmp_path / f"{name}-default", "--chunk-size", "8KiB", "-q",
                   check=True)
        stoker_cli("pack", *inputs, tmp_path / f"{name}-path", "--chunk-size", "8KiB", "-q",
                   "--order", "path", check=True)
        assert classes_per_chunk(tmp_path / f"{name}-path") <= 1.5, name
        assert classes_per_chunk(tmp_path / f"{name}-default") >= 3, name
    bad = stoker_cli("pack", *shards, tmp_path / "bad", "--mix-memory", "lots")
    assert bad.returncode == 2 and "--mix-memory" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_a_pack_without_labels_says_why_for_its_kind_of_input(tmp_path, stoker_cli):
    """--labels auto and no labels found: the note names what a tree or a tar shard lacked (a
    tar shard's labels are .cls members, not class directories)."""
    import tarfile

    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.bin").write_bytes(b"a")
    shard = tmp_path / "shard-0.tar"
    with tarfile.open(shard, "w") as tar:
        for name, data in (("s0.bin", b"x"), ("s0.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    proc = stoker_cli("pack", flat, tmp_path / "flat-ds", check=True)
    assert "no labels: the files are not in class directories" in proc.stderr, proc.stderr
    proc = stoker_cli("pack", shard, tmp_path / "tar-ds", check=True)
    assert "no labels: no sample has a .cls member" in proc.stderr, proc.stderr
    assert "class directories" not in proc.stderr
    summary = json.loads(stoker_cli("pack", "--json", shard, tmp_path / "tar-json",
                                    check=True).stdout)
    assert summary["labels_found"] is False
    assert summary["notes"] == ["no labels: no sample has a .cls member (--labels none says so "
                                "quietly)"]
    with pytest.warns(UserWarning, match="no sample has a .cls member"):
        stoker.pack(str(shard), str(tmp_path / "tar-py"))


def test_a_damaged_mds_index_is_an_error_not_a_tree_of_files(tmp_path, stoker_cli):
    """An MDS or LitData directory whose index.json was cut short is a migration that failed,
    said as such; a tree that merely holds some other index.json packs as files."""
    src = tmp_path / "mds"
    src.mkdir()
    (src / "index.json").write_text('{"version": 2, "shards": [{"column_encodings": ["int"], ')
    (src / "shard.00000.mds").write_bytes(b"\0" * 100)
    proc = stoker_cli("pack", src, tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert "index.json: not JSON" in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "versions").exists()
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "index.json").write_text('{"pages": [1, 2')  # not MDS, not even JSON: a file
    (tree / "a" / "x.bin").write_bytes(b"x")
    stoker_cli("pack", tree, tmp_path / "files", "--labels", "none", check=True)
    assert stoker.Dataset(str(tmp_path / "files")).find("index.json") is not None
