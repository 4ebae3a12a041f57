"""Datasets on S3 (src/s3): stoker against a real Ceph RADOS Gateway, boto3 as the independent
client on the other side.

- what stoker packs to s3:// is what boto3 downloads (and verifies as a local dataset);
- what boto3 uploads (a dataset packed locally) is what stoker reads, CLI and Python Loader;
- a pack killed with -9 mid-upload leaves no visible dataset (no version record, docs/format.md
  §5: a version is visible exactly when versions/<v>.version exists);
- `stoker serve` exports an s3:// dataset; bad credentials, buckets and URIs are clear errors.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import STOKER, make_tree, s3_skip

pytestmark = [pytest.mark.s3, s3_skip,
              pytest.mark.skipif(STOKER is None, reason="stoker CLI not installed")]


def env_for(s3_server, **overrides) -> dict[str, str]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("AWS_"):
            del env[k]
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # never the real 169.254.169.254 (conftest)
    env.update(s3_server["env"])
    env.update(overrides)
    return env


def stoker(s3_server, *args, check=True, **env) -> subprocess.CompletedProcess:
    r = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=300,
                       env=env_for(s3_server, **env))
    if check:
        assert r.returncode == 0, f"stoker {' '.join(args)}: {r.returncode}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3src")
    # Many small files plus one over two multipart parts (16 MiB each): both upload paths.
    files = make_tree(root / "src", seed=31, classes=3, files_per_class=25, max_size=60_000)
    big = os.urandom(40 << 20)
    (root / "src" / "class01" / "big file+x.bin").write_bytes(big)
    files["class01/big file+x.bin"] = big
    return root / "src", files


def test_what_stoker_packs_boto3_reads(s3_server, s3, bucket, tree, tmp_path):
    src, files = tree
    stoker(s3_server, "pack", str(src), f"s3://{bucket}/sets/train.stoker", "--chunk-size", "4MiB")
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="sets/train.stoker/") for o in page.get("Contents", [])]
    # Format 2 (docs/format.md): one version record, one segment (one pack), the chunks; no
    # MANIFEST, no snapshots/, no temporary objects left by publishing.
    rel = sorted(k[len("sets/train.stoker/"):] for k in keys)
    assert [k for k in rel if k.startswith("versions/")] == ["versions/0000000000000001.version"]
    assert len([k for k in rel if re.fullmatch(r"segments/[0-9a-f]{16}\.seg", k)]) == 1, rel
    assert any(re.fullmatch(r"chunks/[0-9a-f]{16}\.chunk", k) for k in rel), rel
    assert all(re.fullmatch(r"(versions/[0-9a-f]{16}\.version|segments/[0-9a-f]{16}\.seg|"
                            r"chunks/[0-9a-f]{16}\.chunk)", k) for k in rel), rel
    # Download everything with boto3: it is a complete local dataset, every byte right.
    local = tmp_path / "copy"
    for key in keys:
        dest = local / key[len("sets/train.stoker/"):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(dest))
    r = subprocess.run([STOKER, "verify", str(local)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for rel in ["class01/big file+x.bin", next(iter(files))]:
        out = subprocess.run([STOKER, "cat", str(local), rel], capture_output=True).stdout
        assert out == files[rel]
    # And stoker itself reads the S3 copy: verify, ls, cat.
    assert "checked: OK" in stoker(s3_server, "verify", f"s3://{bucket}/sets/train.stoker").stdout
    listed = stoker(s3_server, "ls", f"s3://{bucket}/sets/train.stoker", "class01").stdout
    assert "big file+x.bin" in listed
    cat = subprocess.run([STOKER, "cat", f"s3://{bucket}/sets/train.stoker", "class01/big file+x.bin"],
                         capture_output=True, env=env_for(s3_server), timeout=120)
    assert cat.returncode == 0 and cat.stdout == files["class01/big file+x.bin"]


_EPOCH = r"""
import hashlib, json, sys
import stoker
loader = stoker.Loader(sys.argv[1], shuffle="chunk", seed=3)
out = {path: hashlib.sha256(data).hexdigest() for data, label, path in loader}
print(json.dumps(out))
"""


def test_what_boto3_uploads_stoker_reads(s3_server, s3, bucket, tree, tmp_path):
    src, files = tree
    local = tmp_path / "local.stoker"
    subprocess.run([STOKER, "pack", str(src), str(local), "--chunk-size", "2MiB"], check=True,
                   capture_output=True)
    for path in local.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"up/{path.relative_to(local)}")
    uri = f"s3://{bucket}/up"
    assert "checked: OK" in stoker(s3_server, "verify", uri).stdout
    r = subprocess.run([sys.executable, "-c", _EPOCH, uri], capture_output=True, text=True,
                       env=env_for(s3_server), timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {p: hashlib.sha256(b).hexdigest() for p, b in files.items()}


def test_a_killed_pack_never_becomes_visible(s3_server, s3, bucket, tmp_path):
    src = tmp_path / "src"
    for i in range(12):
        (src / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(6 << 20))
    uri = f"s3://{bucket}/killed"
    p = subprocess.Popen([STOKER, "pack", str(src), uri, "--chunk-size", "8MiB"],
                         env=env_for(s3_server), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    # Kill it once the first chunk object exists (mid-upload), or after 20 s at the latest.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and p.poll() is None:
        listing = s3.list_objects_v2(Bucket=bucket, Prefix="killed/chunks/")
        if listing.get("KeyCount", 0) > 0:
            break
        time.sleep(0.05)
    killed_running = p.poll() is None
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert killed_running, "pack finished before it could be killed (make the source larger)"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="killed/").get("Contents", [])]
    assert any(k.startswith("killed/chunks/") for k in keys), keys    # it was killed mid-pack
    assert not any(k.startswith("killed/versions/") for k in keys), keys  # no version published
    r = stoker(s3_server, "verify", uri, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{uri} is not a stoker dataset (no versions/)" in r.stderr, r.stderr
    # Packing again completes, and only then is there a dataset.
    stoker(s3_server, "pack", str(src), uri, "--chunk-size", "8MiB")
    verified = stoker(s3_server, "verify", uri).stdout
    assert "version 1, 12 files" in verified and "checked: OK" in verified, verified


def test_serve_exports_an_s3_dataset(s3_server, bucket, tree, tmp_path):
    src, files = tree
    stoker(s3_server, "pack", str(src), f"s3://{bucket}/served")
    secret = tmp_path / "secret"
    secret.write_text("s3-serve-test-secret-0123456789\n")
    secret.chmod(0o600)
    server = subprocess.Popen([STOKER, "serve", "--listen", "127.0.0.1:0", "--dataset",
                               f"train=s3://{bucket}/served", "--secret-file", str(secret)],
                              env=env_for(s3_server), stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert "serving 1 dataset" in line, line
        port = line.rsplit(":", 1)[1].split(",")[0].strip()
        r = subprocess.run([STOKER, "verify", f"stoker://127.0.0.1:{port}/train"],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, STOKER_SECRET_FILE=str(secret)))
        assert r.returncode == 0 and "checked: OK" in r.stdout, r.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_s3_mistakes_are_clear_errors(s3_server, bucket, tree):
    src, _ = tree
    wrong = stoker(s3_server, "verify", f"s3://{bucket}/nothing-here", check=False)
    assert wrong.returncode == 1 and f"s3://{bucket}/nothing-here" in wrong.stderr
    bad_key = stoker(s3_server, "ls", f"s3://{bucket}/x", check=False,
                     AWS_SECRET_ACCESS_KEY="not-the-secret-key-0000000000000000000000")
    # Opening lists versions/ first (docs/format.md §5): a GET whose 403 answer carries S3's
    # error code.
    assert bad_key.returncode == 1, bad_key.stderr
    assert "PermissionDenied" in bad_key.stderr and f"s3://{bucket}/" in bad_key.stderr \
        and "HTTP 403 SignatureDoesNotMatch" in bad_key.stderr, bad_key.stderr
    bad_get = stoker(s3_server, "cat", f"s3://{bucket}/x", "f", check=False,
                     AWS_SECRET_ACCESS_KEY="not-the-secret-key-0000000000000000000000")
    assert bad_get.returncode == 1 and "403" in bad_get.stderr
    no_bucket = stoker(s3_server, "verify", "s3://no-such-bucket-here/ds", check=False)
    assert no_bucket.returncode == 1 and "s3://no-such-bucket-here/ds" in no_bucket.stderr
    bad_uri = stoker(s3_server, "verify", "s3://UPPER/ds", check=False)
    assert bad_uri.returncode != 0 and "bad bucket name" in bad_uri.stderr
    no_keys = stoker(s3_server, "verify", f"s3://{bucket}/x", check=False,
                     AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="", HOME="/nonexistent")
    assert no_keys.returncode != 0 and "AWS_ACCESS_KEY_ID" in no_keys.stderr
