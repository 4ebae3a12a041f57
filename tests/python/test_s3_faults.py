"""stoker's S3 backend against a misbehaving S3: faults injected between stoker and a real gateway.

A dataset is packed straight to the Ceph RADOS Gateway (tests/s3/rgw.py); then it is read, or
another one written, THROUGH tests/s3/fault_proxy.py, which forwards every request unchanged
except the ones its rules break: 503 SlowDown answers, connections reset before the answer or in
the middle of the body, bodies cut short (the true Content-Length, then a clean close), a byte
flipped in a body, and answers lost after the gateway did the work.

Readers are `stoker verify` and stoker.Loader (in a subprocess, since the S3 settings come from
the environment), and every sample's bytes are compared with the source file. What must hold:
  - transient faults (within AWS_MAX_ATTEMPTS, default 3) are retried: the result is exactly
    right, never a short read handed on as data;
  - with no attempts left, a clear error naming the s3:// object and the 503 SlowDown;
  - flipped bytes are never handed on: verify exits 3 naming the corrupt files, the Loader
    raises stoker.CorruptionError naming the sample;
  - faults while packing to S3 are retried and the dataset verifies; a permanent failure leaves
    no visible dataset (no version record, docs/format.md §5; with --append the previous
    version stays current) and removes what the pack wrote;
  - a version record created by the gateway whose answer was lost is read back: the pack
    succeeds and the version is published exactly once.

The dataset layout is format 2 (docs/format.md): versions/<v:016x>.version records,
segments/<id:016x>.seg metadata segments and chunks/<id:016x>.chunk, all created once and never
modified. A reader lists versions/, reads the newest record, then its segments, then chunks; a
pack uploads chunks, then its segment (PUT If-None-Match), then the record (PUT If-None-Match: *).

Skipped where the Ceph packages or boto3 are missing (STOKER_REQUIRE_S3=1 makes that a failure).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
import rgw  # noqa: E402
from conftest import STOKER as _STOKER, s3_skip, temporary_bucket  # noqa: E402
from fault_proxy import FaultProxy, Rule  # noqa: E402

pytestmark = [pytest.mark.s3, s3_skip]

STOKER = _STOKER or str(Path(sys.executable).with_name("stoker"))   # conftest's, as the CLI tests
MiB = 1 << 20
CHUNK = r"/ds/chunks/[0-9a-f]+\.chunk"                  # path_re of the dataset's chunk objects
CHUNK_RE = re.compile(CHUNK)
SEGMENT = r"/ds/segments/[0-9a-f]{16}\.seg"             # path_re of its one segment
RECORD = "/ds/versions/0000000000000001.version"        # path of its one version record


# ---- fixtures ---------------------------------------------------------------------------------

# s3_server and s3 (boto3) come from conftest.py.

@pytest.fixture(scope="module")
def bucket(s3):
    yield from temporary_bucket(s3, "faults")


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """60 files in 3 classes, 0 to 20,000 random bytes each (one empty)."""
    root = tmp_path_factory.mktemp("faults-src")
    rng = random.Random(2024)
    for c in range(3):
        (root / f"class{c}").mkdir()
        for i in range(20):
            size = 0 if (c, i) == (1, 7) else rng.randint(1, 20000)
            (root / f"class{c}" / f"f{i:02d}.bin").write_bytes(rng.randbytes(size))
    return root


def _env(s3_server, endpoint: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server["env"])
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = os.devnull
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    env.update(extra)
    return env


def _stoker(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([STOKER, *args], env=env, capture_output=True, text=True,
                          errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def dataset(s3_server, s3, bucket, src) -> dict:
    """src packed straight to the gateway (64 KiB chunks: 9 of them), and its layout."""
    uri = f"s3://{bucket}/ds"
    r = _stoker("pack", "-q", "--chunk-size", "64KiB", str(src), uri, env=_env(s3_server))
    assert r.returncode == 0, r.stderr
    chunks = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ds/chunks/")
              ["Contents"]}
    assert len(chunks) >= 5, chunks
    layout = _run_py(_LAYOUT, uri, env=_env(s3_server))
    assert layout["ok"], layout
    return {"uri": uri, "bucket": bucket, "chunks": chunks, "files": layout["files"]}


@pytest.fixture
def proxy(s3_server):
    """make(rules) -> a started FaultProxy in front of the gateway; stopped after the test."""
    host, port = s3_server["endpoint"].split("://", 1)[1].rsplit(":", 1)
    started: list[FaultProxy] = []

    def make(*rules: Rule) -> FaultProxy:
        p = FaultProxy(host, int(port), list(rules)).start()
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()
        assert p.counters["proxy_errors"] == [], p.counters   # the proxy itself worked


# ---- readers ----------------------------------------------------------------------------------

_LAYOUT = """
import json, sys, stoker
ds = stoker.Dataset(sys.argv[1])
files = [ds.stat(i) for i in range(len(ds))]
print(json.dumps({"ok": True, "files": [
    {"path": f["path"], "size": f["size"], "offset": f["offset"],
     "chunk": "ds/chunks/%016x.chunk" % f["chunk"]} for f in files]}))
"""

# Every sample of one epoch, each compared with its source file; the error if the pass fails.
_LOAD = """
import json, os, sys, stoker
uri, src = sys.argv[1], sys.argv[2]
out = {"ok": True, "paths": [], "bad": []}
try:
    classes = sorted(os.listdir(src))
    for data, label, path in stoker.Loader(uri, shuffle="chunk", seed=5, io_depth=4):
        out["paths"].append(path)
        with open(os.path.join(src, path), "rb") as f:
            want = f.read()
        if bytes(data) != want or label != classes.index(path.split("/")[0]):
            out["bad"].append(path)
except Exception as e:
    out.update(ok=False, type=type(e).__name__, message=str(e),
               corruption=isinstance(e, stoker.CorruptionError),
               oserror=isinstance(e, OSError))
print(json.dumps(out))
"""


def _run_py(script: str, *args: str, env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                       text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"   # no crash
    return json.loads(r.stdout.strip().splitlines()[-1])


def _load(uri: str, src: Path, env: dict[str, str]) -> dict:
    return _run_py(_LOAD, uri, str(src), env=env)


def _assert_all_right(result: dict, src: Path) -> None:
    assert result["ok"], result
    assert result["bad"] == []
    want = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert sorted(result["paths"]) == want                       # each sample exactly once


def _assert_verifies(uri: str, env: dict[str, str], files: int = 60) -> None:
    r = _stoker("verify", uri, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{files} files in" in r.stdout and r.stdout.rstrip().endswith("OK"), r.stdout


def _no_crash(r: subprocess.CompletedProcess) -> None:
    assert r.returncode > 0, (r.returncode, r.stderr)           # < 0: killed by a signal
    assert "terminate called" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr


# ---- the proxy itself --------------------------------------------------------------------------

def test_proxy_passes_everything_through_unchanged(s3_server, s3, bucket, proxy):
    p = proxy()
    via = rgw.boto3_client(dict(s3_server, endpoint=p.url))
    data = random.Random(1).randbytes(3 * MiB + 17)
    via.put_object(Bucket=bucket, Key="pass/one", Body=data)
    assert s3.get_object(Bucket=bucket, Key="pass/one")["Body"].read() == data
    assert via.get_object(Bucket=bucket, Key="pass/one")["Body"].read() == data
    got = via.get_object(Bucket=bucket, Key="pass/one", Range="bytes=1000-1999")
    assert got["Body"].read() == data[1000:2000]
    assert via.head_object(Bucket=bucket, Key="pass/one")["ContentLength"] == len(data)
    assert [o["Key"] for o in via.list_objects_v2(Bucket=bucket, Prefix="pass/")["Contents"]] \
        == ["pass/one"]
    via.delete_object(Bucket=bucket, Key="pass/one")
    c = p.counters
    assert c["requests"] == c["forwarded"] == 6 and c["faults"] == {}, c


# ---- reading through faults ---------------------------------------------------------------------

@pytest.mark.parametrize("reader", ["verify", "loader"])
def test_slowdown_twice_per_object_is_retried(s3_server, dataset, src, proxy, reader):
    """The first 2 GETs of every chunk, of the segment and of the version record answer 503
    SlowDown, and the first HEAD of each object too: 3 attempts (the default) get everything
    right."""
    p = proxy(Rule("slowdown", method="GET", path="/ds/", times=2, per_key=True),
              Rule("slowdown", method="HEAD", path="/ds/", times=1, per_key=True,
                   name="slowdown-head"))
    env = _env(s3_server, p.url)
    if reader == "verify":
        _assert_verifies(dataset["uri"], env)
    else:
        _assert_all_right(_load(dataset["uri"], src, env), src)
    gets = {t.split("?")[0] for m, t, *_ in p.log if m == "GET" and "/ds/" in t}
    assert sum(CHUNK_RE.search(t) is not None for t in gets) == len(dataset["chunks"])
    assert p.counters["faults"]["slowdown"] == 2 * len(gets)     # every object got its 2
    assert p.counters["faults"]["slowdown-head"] >= 1


@pytest.mark.parametrize("reader", ["verify", "loader"])
def test_connection_resets_are_retried(s3_server, dataset, src, proxy, reader):
    """Each chunk: the first GET is reset (RST) after half its body, the second is reset
    before any answer; the third succeeds."""
    p = proxy(Rule("reset_mid_body", method="GET", path_re=CHUNK, times=1, per_key=True),
              Rule("reset", method="GET", path_re=CHUNK, times=1, per_key=True))
    env = _env(s3_server, p.url)
    if reader == "verify":
        _assert_verifies(dataset["uri"], env)
    else:
        _assert_all_right(_load(dataset["uri"], src, env), src)
    n = len(dataset["chunks"])
    assert p.counters["faults"] == {"reset_mid_body": n, "reset": n}


@pytest.mark.parametrize("reader", ["verify", "loader"])
def test_truncated_bodies_are_never_data(s3_server, dataset, src, proxy, reader):
    """Every GET of the dataset's objects (version record, segment, chunks): first the headers
    alone, then all but the last byte, each with the true Content-Length and a clean close; then
    the real one."""
    p = proxy(Rule("truncate", method="GET", path="/ds/", times=1, per_key=True, fraction=0.0,
                   name="headers-only"),
              Rule("truncate", method="GET", path="/ds/", times=1, per_key=True,
                   fraction=0.9999, name="one-byte-short"))
    env = _env(s3_server, p.url)
    if reader == "verify":
        _assert_verifies(dataset["uri"], env)
    else:
        _assert_all_right(_load(dataset["uri"], src, env), src)
    c = p.counters["faults"]
    assert c["headers-only"] == c["one-byte-short"] >= len(dataset["chunks"]) + 2


# what -> (path_re of the GETs that fail, the object the error must name)
_UNAVAILABLE = {
    "chunks": (CHUNK, r"/ds/chunks/[0-9a-f]+\.chunk"),
    "version record": (RECORD, re.escape(RECORD)),
    "segment": (SEGMENT, SEGMENT),
    # the listing of versions/, the first request of every reader (a GET of the bucket with
    # prefix=<dataset>/versions/ in the query): the error must still say which dataset
    "versions listing": (r"[?&]list-type=2&.*prefix=ds%2Fversions", r"/ds(/versions/?)?\b"),
}


@pytest.mark.parametrize("what", list(_UNAVAILABLE))
def test_no_attempts_left_is_a_clear_error(s3_server, dataset, src, proxy, what):
    """AWS_MAX_ATTEMPTS=1 and every GET of one kind of object (the chunks, the version record,
    the segment, the listing of versions/) answers 503 SlowDown: verify and the Loader fail,
    naming the s3:// object and the 503 SlowDown; nothing crashes, nothing hangs."""
    path_re, named = _UNAVAILABLE[what]
    p = proxy(Rule("slowdown", method="GET", path_re=path_re))
    env = _env(s3_server, p.url, AWS_MAX_ATTEMPTS="1")
    obj = rf"s3://{dataset['bucket']}{named}"

    r = _stoker("verify", dataset["uri"], env=env)
    _no_crash(r)
    text = r.stdout + r.stderr
    assert re.search(obj, text) and "503" in text and "SlowDown" in text, text
    assert not text.rstrip().endswith("OK")

    result = _load(dataset["uri"], src, env)
    assert not result["ok"] and result["oserror"], result
    assert result["bad"] == [] and result["paths"] == [], result    # nothing was handed on
    assert re.search(obj, result["message"]) and "503" in result["message"] \
        and "SlowDown" in result["message"], result
    assert not result["corruption"], result      # unavailable is not corrupt
    assert p.counters["faults"]["slowdown"] >= 2


def _files_at_middle(dataset: dict, chunk_key: str) -> list[str]:
    """The files whose bytes cover the middle byte of a whole-chunk GET (what "corrupt" flips)."""
    mid = dataset["chunks"][chunk_key] // 2
    return [f["path"] for f in dataset["files"]
            if f["chunk"] == chunk_key and f["offset"] <= mid < f["offset"] + f["size"]]


def test_corrupt_chunk_bytes_verify_names_the_files(s3_server, dataset, proxy):
    """A byte flipped in the middle of every chunk GET: verify exits 3 (corruption) and names
    exactly the files holding those bytes."""
    p = proxy(Rule("corrupt", method="GET", path_re=CHUNK))
    r = _stoker("verify", "--json", dataset["uri"], env=_env(s3_server, p.url))
    assert r.returncode == 3, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is False and report["problems"] == []
    named = sorted(f["path"] for f in report["corrupt_files"])
    want = sorted(f for key in dataset["chunks"] for f in _files_at_middle(dataset, key))
    assert want and named == want, (named, want)
    assert all("CRC32C mismatch" in f["message"] for f in report["corrupt_files"])
    # a chunk whose middle byte lies in no file's bytes is named as a chunk instead
    for key in dataset["chunks"]:
        if not _files_at_middle(dataset, key):
            assert any(key.removeprefix("ds/") == c["path"] for c in report["corrupt_chunks"]), \
                report
    assert p.counters["faults"]["corrupt"] == len(dataset["chunks"])


def test_corrupt_chunk_bytes_loader_raises_naming_the_sample(s3_server, dataset, src, proxy):
    """The same for the Loader: it raises stoker.CorruptionError naming a sample path and
    its chunk, and every sample it yielded before that is right."""
    p = proxy(Rule("corrupt", method="GET", path_re=CHUNK))
    result = _load(dataset["uri"], src, _env(s3_server, p.url))
    assert not result["ok"] and result["corruption"], result
    assert result["bad"] == [], result                               # nothing wrong handed on
    m = re.match(r"(class\d/f\d\d\.bin): CRC32C mismatch", result["message"])
    assert m and (src / m.group(1)).is_file(), result["message"]
    # ... and its chunk (as a path inside the dataset: the read pipeline's wording), the one
    # the segment puts it in
    chunk = re.search(r" in (?:s3://[^ ]+/ds/)?(chunks/[0-9a-f]+\.chunk)", result["message"])
    assert chunk, result["message"]
    [f] = [f for f in dataset["files"] if f["path"] == m.group(1)]
    assert f["chunk"] == "ds/" + chunk.group(1)
    assert m.group(1) not in result["paths"]
    assert p.counters["faults"]["corrupt"] >= 1



# what -> path_re of the metadata object whose GETs get a byte flipped (also the name to report)
_METADATA = {"segment": SEGMENT, "version record": re.escape(RECORD)}


@pytest.mark.parametrize("what", list(_METADATA))
def test_corrupt_metadata_verify(s3_server, dataset, proxy, what):
    """A byte flipped in every GET of the segment or of the version record: verify exits 3
    naming the object (its CRC32C no longer matches) and the dataset as unreadable."""
    p = proxy(Rule("corrupt", method="GET", path_re=_METADATA[what]))
    r = _stoker("verify", dataset["uri"], env=_env(s3_server, p.url))
    assert r.returncode == 3, r.stdout + r.stderr
    assert re.search(rf"s3://{dataset['bucket']}{_METADATA[what]}: .*CRC32C mismatch", r.stdout), \
        r.stdout
    assert "dataset unreadable" in r.stdout and not r.stdout.rstrip().endswith("OK"), r.stdout
    assert p.counters["faults"]["corrupt"] >= 1


@pytest.mark.parametrize("what", list(_METADATA))
def test_corrupt_metadata_loader(s3_server, dataset, src, proxy, what):
    """The Loader raises stoker.CorruptionError naming the object and yields nothing."""
    p = proxy(Rule("corrupt", method="GET", path_re=_METADATA[what]))
    result = _load(dataset["uri"], src, _env(s3_server, p.url))
    assert not result["ok"] and result["paths"] == [], result
    assert result["corruption"], result
    assert re.search(rf"s3://{dataset['bucket']}{_METADATA[what]}", result["message"]), result
    assert p.counters["faults"]["corrupt"] >= 1


# ---- writing through faults ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_src(tmp_path_factory) -> Path:
    """3 files of 12 MiB (one 36 MiB chunk: a multipart upload of 2 parts) + a few small ones."""
    root = tmp_path_factory.mktemp("faults-big")
    rng = random.Random(7)
    for c in range(2):
        (root / f"class{c}").mkdir()
    for i in range(3):
        (root / "class0" / f"big{i}.bin").write_bytes(rng.randbytes(12 * MiB + i))
    for i in range(5):
        (root / "class1" / f"small{i}.bin").write_bytes(rng.randbytes(1000 * i))
    return root


@pytest.fixture(scope="module")
def extra_src(tmp_path_factory) -> Path:
    """What the append tests add to src: 3 new files in src's class1 and 2 in a new class3."""
    root = tmp_path_factory.mktemp("faults-extra")
    rng = random.Random(11)
    for cls, names in (("class1", ["new0.bin", "new1.bin", "new2.bin"]),
                       ("class3", ["a.bin", "b.bin"])):
        (root / cls).mkdir()
        for name in names:
            (root / cls / name).write_bytes(rng.randbytes(rng.randint(1, 9000)))
    return root


def _keys(s3, bucket: str, prefix: str) -> list[str]:
    """Every object under prefix/, relative to it, sorted."""
    return sorted(o["Key"][len(prefix) + 1:] for page in
                  s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
                  for o in page.get("Contents", []))


def _assert_format2_layout(keys: list[str], versions: int, segments: int) -> None:
    """Exactly versions 1..versions, `segments` segments and some chunks: nothing else (no
    temporary objects, nothing of format 1)."""
    want = [f"versions/{v:016x}.version" for v in range(1, versions + 1)]
    assert [k for k in keys if k.startswith("versions/")] == want, keys
    segment_keys = [k for k in keys if re.fullmatch(r"segments/[0-9a-f]{16}\.seg", k)]
    assert len(segment_keys) == segments, keys
    assert any(re.fullmatch(r"chunks/[0-9a-f]{16}\.chunk", k) for k in keys), keys
    assert all(re.fullmatch(r"(versions/[0-9a-f]{16}\.version|segments/[0-9a-f]{16}\.seg|"
                            r"chunks/[0-9a-f]{16}\.chunk)", k) for k in keys), keys


def test_pack_retries_put_faults(s3_server, s3, bucket, big_src, proxy):
    """Packing through the proxy: the first try of every PUT (the parts of a multipart chunk,
    the segment, the version record) and POST (create, complete) answers 503 SlowDown; the
    second try of each PUT, and of the completion, is done by the gateway but its answer lost
    (connection reset). The retries of the segment and of the version record, both created
    exclusively (If-None-Match: *), then meet their own first creation (HTTP 412): the writer
    must tell that from another writer's object. The pack succeeds, publishes version 1 once,
    deletes nothing, and the dataset verifies and reads back right."""
    p = proxy(Rule("slowdown", method="PUT", times=1, per_key=True),
              Rule("slowdown", method="POST", times=1, per_key=True, name="slowdown-post"),
              Rule("reset", method="PUT", times=1, per_key=True, forward=True,
                   name="lost-answer"),
              Rule("reset", method="POST", query="uploadId=", times=1, forward=True,
                   name="lost-complete"))
    uri = f"s3://{bucket}/packed-through-faults"
    r = _stoker("pack", "-q", "--chunk-size", "64MiB", str(big_src), uri,
                env=_env(s3_server, p.url))
    assert r.returncode == 0, r.stdout + r.stderr
    methods = [(m, t) for m, t, *_ in p.log]
    assert any(m == "POST" and "?uploads" in t for m, t in methods), methods  # multipart
    assert any(m == "PUT" and "partNumber=2" in t for m, t in methods), methods
    puts = {t for m, t, *_ in methods if m == "PUT"}
    assert any("/segments/" in t for t in puts) and any("/versions/" in t for t in puts), puts
    c = p.counters["faults"]
    # every PUT (2 parts, the segment, the record: at least 4) got its 503 and its lost answer
    assert c["slowdown"] == len(puts) >= 4 and c["lost-answer"] == c["slowdown"], (c, puts)
    assert c["slowdown-post"] == 2 and c["lost-complete"] == 1, c
    # the record's third try found it created by the second: 412, then read back
    record = "/packed-through-faults/versions/0000000000000001.version"
    assert [e[3] for e in p.log if e[0] == "PUT" and e[1].endswith(record)] == [503, None, 412], \
        p.log
    # publishing removes nothing; the writer removes its lease when it is done
    deletes = [t for m, t, *_ in p.log if m == "DELETE"]
    assert deletes and all("/gc/writers/" in t and t.endswith(".lease") for t in deletes), p.log
    env = _env(s3_server)                                     # straight to the gateway now
    _assert_verifies(uri, env, files=8)
    _assert_all_right(_load(uri, big_src, env), big_src)
    _assert_format2_layout(_keys(s3, bucket, "packed-through-faults"), versions=1, segments=1)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# what -> (the rule that fails it, big source?, the object the error must name)
_PERMANENT = {
    "chunk PUT": (Rule("slowdown", method="PUT", path="/chunks/", times=1), False, "/chunks/"),
    "part PUT": (Rule("slowdown", method="PUT", query="partNumber=2"), True, "/chunks/"),
    "complete POST": (Rule("slowdown", method="POST", query="uploadId="), True, "/chunks/"),
    "segment PUT": (Rule("slowdown", method="PUT", path="/segments/"), False, "/segments/"),
    "version-record PUT": (Rule("slowdown", method="PUT", path="/versions/"), False,
                           "/versions/0000000000000001.version"),
}


@pytest.mark.parametrize("what", list(_PERMANENT))
def test_pack_permanent_failure_publishes_nothing(s3_server, s3, bucket, src, big_src, proxy,
                                                  what):
    """AWS_MAX_ATTEMPTS=1 and a 503 SlowDown on one step of the pack (a chunk PUT, the 2nd part
    or the completion of a multipart chunk, the segment PUT, the version-record PUT): it fails
    with a clear error naming the object, no dataset becomes visible (no version record), what
    it wrote is removed again (no version lists it) and no multipart upload is left behind."""
    rule, big, named = _PERMANENT[what]
    p = proxy(rule)
    prefix = f"fail-{what.lower().replace(' ', '-')}"
    uri = f"s3://{bucket}/{prefix}"
    r = _stoker("pack", "-q", "--chunk-size", "64MiB" if big else "64KiB",
                str(big_src if big else src), uri,
                env=_env(s3_server, p.url, AWS_MAX_ATTEMPTS="1"))
    _no_crash(r)
    assert f"s3://{bucket}/{prefix}{named}" in r.stderr, r.stderr
    assert "503" in r.stderr and "SlowDown" in r.stderr, r.stderr
    assert p.counters["faults"]["slowdown"] == 1
    if big:
        assert any("?uploads" in t for _, t, *_ in p.log), p.log          # it was multipart
    if what != "chunk PUT":                      # the steps before the failing one were done
        assert any(m == "PUT" and "/chunks/" in t for m, t, *_ in p.log), p.log
    assert _keys(s3, bucket, prefix) == []       # no version record, no segment, no chunk
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/")
            .get("Uploads", [])] == []
    v = _stoker("verify", uri, env=_env(s3_server))
    assert v.returncode == 1, v.stdout + v.stderr
    assert f"{uri} is not a stoker dataset (no versions/)" in v.stderr, v.stderr


# what -> (the rule that corrupts the request, big source?, where the object lies)
_CORRUPT_UPLOAD = {
    "chunk PUT": (Rule("corrupt_request", method="PUT", path="/chunks/", times=1), False,
                  "/chunks/"),
    "part PUT": (Rule("corrupt_request", method="PUT", query="partNumber=1", times=1), True,
                 "/chunks/"),
    "complete POST": (Rule("corrupt_request", method="POST", query="uploadId=", times=1), True,
                      "/chunks/"),
    "segment PUT": (Rule("corrupt_request", method="PUT", path="/segments/", times=1), False,
                    "/segments/"),
    "version-record PUT": (Rule("corrupt_request", method="PUT", path="/versions/", times=1),
                           False, "/versions/0000000000000001.version"),
}


@pytest.mark.parametrize("what", list(_CORRUPT_UPLOAD))
def test_corrupted_upload_is_never_published(s3_server, s3, bucket, src, big_src, proxy, what):
    """A byte flipped in a request body on its way to the gateway (a chunk PUT, a part of a
    multipart chunk, the CompleteMultipartUpload XML, the segment, the version record): the
    gateway refuses it (the SigV4 payload hash no longer matches) and the pack fails naming
    the object, with no dataset visible and nothing left behind; or, had the failure been
    retried, the dataset would have to verify."""
    rule, big, named = _CORRUPT_UPLOAD[what]
    p = proxy(rule)
    prefix = f"corrupt-up-{what.split()[0]}"
    uri = f"s3://{bucket}/{prefix}"
    r = _stoker("pack", "-q", "--chunk-size", "64MiB" if big else "64KiB",
                str(big_src if big else src), uri, env=_env(s3_server, p.url))
    _no_crash(r) if r.returncode else None
    [refused] = [e for e in p.log if e[2] == "corrupt_request"]
    assert 400 <= refused[3] < 500, refused                     # the gateway saw the damage
    if r.returncode == 0:
        _assert_verifies(uri, _env(s3_server), files=8 if big else 60)
    else:
        assert f"s3://{bucket}/{prefix}{named}" in r.stderr and "HTTP 400" in r.stderr, r.stderr
        v = _stoker("verify", uri, env=_env(s3_server))
        assert v.returncode == 1, v.stdout + v.stderr
        assert f"{uri} is not a stoker dataset (no versions/)" in v.stderr, v.stderr
        assert _keys(s3, bucket, prefix) == []   # no record; its segment and chunks removed
        assert s3.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/") \
            .get("Uploads", []) == []


def test_failed_append_keeps_the_previous_version(s3_server, s3, bucket, src, extra_src, proxy):
    """`pack --append` whose version-record PUT (of version 2) fails for good: the dataset stays
    at version 1, which still verifies and reads back exactly, and the append's segment and
    chunks are removed again (no version lists them)."""
    uri = f"s3://{bucket}/append"
    r = _stoker("pack", "-q", "--chunk-size", "64KiB", str(src), uri, env=_env(s3_server))
    assert r.returncode == 0, r.stderr
    before = _keys(s3, bucket, "append")
    _assert_format2_layout(before, versions=1, segments=1)
    p = proxy(Rule("slowdown", method="PUT", path="/append/versions/"))
    r = _stoker("pack", "-q", "--append", "--chunk-size", "64KiB", str(extra_src), uri,
                env=_env(s3_server, p.url, AWS_MAX_ATTEMPTS="1"))
    _no_crash(r)
    assert f"s3://{bucket}/append/versions/0000000000000002.version" in r.stderr \
        and "SlowDown" in r.stderr, r.stderr
    assert p.counters["faults"]["slowdown"] == 1
    puts = [t for m, t, *_ in p.log if m == "PUT"]
    assert any("/segments/" in t for t in puts) and any("/chunks/" in t for t in puts), puts
    env = _env(s3_server)
    info = json.loads(_stoker("info", "--json", uri, env=env).stdout)
    assert info["version"] == 1 and info["files"] == 60, info
    assert _keys(s3, bucket, "append") == before
    _assert_verifies(uri, env)
    _assert_all_right(_load(uri, src, env), src)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["reset", "error"])
def test_lost_version_record_reply_publishes_once(s3_server, s3, bucket, src, extra_src,
                                                   tmp_path, proxy, fault):
    """Every PUT of a version record is done by the gateway but its answer lost: the connection
    dropped (reset), or a 500 InternalError in its place (error). The writer cannot tell from
    the PUTs whether it published (its retries meet its own record: 412, which it never sees
    either), so it reads the record back: holding its own bytes, the version is published.
    A new dataset and then an --append both exit 0, each publishing its version exactly once
    (versions 1 and 2, no rebase to a 3rd, the append's segment kept), and the result verifies
    and reads back right."""
    prefix = f"lost-reply-{fault}"
    p = proxy(Rule(fault, method="PUT", path=f"/{prefix}/versions/", forward=True))
    uri = f"s3://{bucket}/{prefix}"
    env = _env(s3_server, p.url)
    summaries = []
    for source, append in ((src, []), (extra_src, ["--append"])):
        r = _stoker("pack", "--json", "-q", *append, "--chunk-size", "64KiB", str(source), uri,
                    env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        summaries.append(json.loads(r.stdout))
    assert [(s["version"], s["files"], s["files_added"], s["classes_added"], s["segments"],
             s["publish_attempts"]) for s in summaries] == [(1, 60, 60, 3, 1, 1),
                                                            (2, 65, 5, 1, 2, 1)], summaries
    # Every PUT of a record (2 versions, each tried AWS_MAX_ATTEMPTS = 3 times) reached the
    # gateway and lost its answer; no other record was ever tried.
    records = [(t, action) for m, t, action, _ in p.log if m == "PUT" and "/versions/" in t]
    assert records == [(f"/{bucket}/{prefix}/versions/{v:016x}.version", fault)
                       for v in (1, 2) for _ in range(3)], records
    assert p.counters["faults"][fault] == 6 and p.counters["forwarded"] == p.counters["requests"]
    _assert_format2_layout(_keys(s3, bucket, prefix), versions=2, segments=2)
    direct = _env(s3_server)
    info = json.loads(_stoker("info", "--json", uri, env=direct).stdout)
    assert (info["version"], info["parent"], info["files"], info["classes"]) == (2, 1, 65, 4), info
    _assert_verifies(uri, direct, files=65)
    everything = tmp_path / "all"
    shutil.copytree(src, everything)
    shutil.copytree(extra_src, everything, dirs_exist_ok=True)
    _assert_all_right(_load(uri, everything, direct), everything)
