"""The S3 test server (scripts/s3-server, tests/s3/rgw.py): a real Ceph RADOS Gateway.

Talks to it with boto3 the way stoker's S3 backend tests and benchmarks will (path-style
addressing, region us-east-1) and checks every byte that comes back: small and empty objects, a
5 MiB+ multipart object, ranged GETs (across the part boundary too), listing with a prefix, a
delimiter and pagination, deletes, and that a wrong secret key is refused. The script itself is
checked too: status, an idempotent second start, and stop (which leaves no daemon or directory).

Skipped, with the reason, where the Ceph packages or boto3 are missing (scripts/setup installs
both); with STOKER_REQUIRE_S3=1 (for CI) a missing piece fails instead.
"""
from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "s3"))
import rgw  # noqa: E402

from conftest import s3_skip  # noqa: E402

pytestmark = [pytest.mark.s3, s3_skip]

MiB = 1 << 20




def _get(s3, bucket, key, **kw) -> tuple[bytes, dict]:
    r = s3.get_object(Bucket=bucket, Key=key, **kw)
    return r["Body"].read(), r


def _error_code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def test_connection_info(s3_server):
    assert s3_server["endpoint"].startswith("http://127.0.0.1:")
    assert s3_server["region"] == "us-east-1"
    assert s3_server["env"]["AWS_ENDPOINT_URL"] == s3_server["endpoint"]
    assert len(s3_server["access_key"]) == 20 and len(s3_server["secret_key"]) == 40
    # cached per process: the same server again, no second start
    assert rgw.start()["endpoint"] == s3_server["endpoint"]


def test_small_objects_round_trip(s3, bucket):
    objects = {"one-byte": b"\x00", "empty": b"", "text.txt": b"hello, s3\n",
               "dir/nested/name with spaces.bin": bytes(range(256)) * 3,
               "unicode-\u00e9\u4e2d.bin": b"\xff" * 1000}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    for key, data in objects.items():
        got, r = _get(s3, bucket, key)
        assert got == data, key
        assert r["ContentLength"] == len(data)
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(data)
    got, r = _get(s3, bucket, "one-byte", Range="bytes=0-0")
    assert got == b"\x00" and r["ResponseMetadata"]["HTTPStatusCode"] == 206
    got, _ = _get(s3, bucket, "dir/nested/name with spaces.bin", Range="bytes=250-261")
    assert got == (bytes(range(256)) * 3)[250:262]
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=bucket, Key="never-written")


def test_multipart_upload_and_ranged_gets(s3, bucket, tmp_path):
    from boto3.s3.transfer import TransferConfig

    rng = random.Random(6)
    data = rng.randbytes(5 * MiB + 12345)           # two parts: 5 MiB (the minimum) + the rest

    # 1. upload_file with a 5 MiB part size: boto3's managed multipart transfer
    path = tmp_path / "five-mib.bin"
    path.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_file(str(path), bucket, "managed.bin", Config=cfg)
    # 2. the explicit multipart API, parts of 5 MiB and 12345 bytes
    up = s3.create_multipart_upload(Bucket=bucket, Key="explicit.bin")
    parts = []
    for number, (lo, hi) in enumerate(((0, 5 * MiB), (5 * MiB, len(data))), start=1):
        r = s3.upload_part(Bucket=bucket, Key="explicit.bin", UploadId=up["UploadId"],
                           PartNumber=number, Body=data[lo:hi])
        parts.append({"ETag": r["ETag"], "PartNumber": number})
    listed = s3.list_parts(Bucket=bucket, Key="explicit.bin", UploadId=up["UploadId"])
    assert [p["Size"] for p in listed["Parts"]] == [5 * MiB, 12345]
    s3.complete_multipart_upload(Bucket=bucket, Key="explicit.bin", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts})

    for key in ("managed.bin", "explicit.bin"):
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["ContentLength"] == len(data)
        assert head["ETag"].strip('"').endswith("-2"), head["ETag"]   # stored as 2 parts
        got, _ = _get(s3, bucket, key)
        assert got == data, key
        # ranged GETs: first byte, across the part boundary, the suffix, open-ended
        boundary = 5 * MiB
        for rng_hdr, want in (("bytes=0-0", data[:1]),
                              (f"bytes={boundary - 100}-{boundary + 99}",
                               data[boundary - 100:boundary + 100]),
                              ("bytes=-777", data[-777:]),
                              (f"bytes={len(data) - 5}-", data[-5:]),
                              ("bytes=1000-1999999", data[1000:2000000])):
            got, r = _get(s3, bucket, key, Range=rng_hdr)
            assert got == want, (key, rng_hdr)
            assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
            assert r["ContentRange"].endswith(f"/{len(data)}")

    # download_fileobj (ranged, parallel GETs inside boto3) gets the same bytes
    buf = io.BytesIO()
    s3.download_fileobj(bucket, "managed.bin", buf, Config=cfg)
    assert buf.getvalue() == data


def test_list_with_prefix_delimiter_and_pagination(s3, bucket):
    keys = ([f"train/class{c}/img{i:03d}.jpg" for c in range(3) for i in range(9)]
            + [f"val/img{i:03d}.jpg" for i in range(5)] + ["train.txt", "README"])
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())

    # prefix + MaxKeys pages, following the continuation tokens by hand
    listed, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        r = s3.list_objects_v2(Bucket=bucket, Prefix="train/", MaxKeys=5, **kw)
        pages += 1
        assert r["KeyCount"] <= 5
        listed += [(o["Key"], o["Size"]) for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        token = r["NextContinuationToken"]
    want = sorted(k for k in keys if k.startswith("train/"))
    assert [k for k, _ in listed] == want                       # all, in order, no duplicates
    assert all(size == len(k) for k, size in listed)
    assert pages == (len(want) + 4) // 5

    # the paginator, with StartAfter
    got = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="train/class1/", StartAfter="train/class1/img004.jpg",
        PaginationConfig={"PageSize": 2}) for o in page.get("Contents", [])]
    assert got == [f"train/class1/img{i:03d}.jpg" for i in range(5, 9)]

    # delimiter: one level of "directories"
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert sorted(p["Prefix"] for p in r["CommonPrefixes"]) == ["train/", "val/"]
    assert sorted(o["Key"] for o in r["Contents"]) == ["README", "train.txt"]
    r = s3.list_objects_v2(Bucket=bucket, Prefix="train/", Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == [f"train/class{c}/" for c in range(3)]
    assert "Contents" not in r

    # ListObjects v1 with Marker paging agrees
    v1, marker = [], ""
    while True:
        r = s3.list_objects(Bucket=bucket, Prefix="val/", MaxKeys=2, Marker=marker)
        v1 += [o["Key"] for o in r.get("Contents", [])]
        if not r["IsTruncated"]:
            break
        marker = v1[-1]
    assert v1 == [f"val/img{i:03d}.jpg" for i in range(5)]


def test_delete_objects_and_bucket(s3):
    name = f"test-del-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    for i in range(4):
        s3.put_object(Bucket=name, Key=f"k{i}", Body=b"x" * i)
    s3.delete_object(Bucket=name, Key="k0")
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.head_object(Bucket=name, Key="k0")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket=name)                            # not empty yet
    assert _error_code(e) == "BucketNotEmpty"
    r = s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": f"k{i}"} for i in (1, 2, 3)]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["k1", "k2", "k3"]
    assert s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(s3.exceptions.ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_wrong_secret_is_refused(s3_server, bucket):
    bad = rgw.boto3_client(dict(s3_server, secret_key="x" * 40))
    with pytest.raises(bad.exceptions.ClientError) as e:
        bad.put_object(Bucket=bucket, Key="nope", Body=b"1")
    assert _error_code(e) == "SignatureDoesNotMatch"
    with pytest.raises(bad.exceptions.ClientError) as e:
        rgw.boto3_client(dict(s3_server, access_key="NOSUCHACCESSKEY00000")).list_buckets()
    assert _error_code(e) == "InvalidAccessKeyId"


def _script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(rgw.SCRIPT), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_script_status_and_idempotent_start(s3_server):
    d = s3_server["dir"]
    state = json.loads((Path(d) / "state.json").read_text())
    st = _script("status", "--dir", d)
    assert st.returncode == 0, st.stderr
    assert f"AWS_ENDPOINT_URL={s3_server['endpoint']}" in st.stdout
    again = _script("start", "--dir", d)                     # already running: same server
    assert again.returncode == 0, again.stderr
    assert again.stdout == st.stdout
    assert json.loads((Path(d) / "state.json").read_text())["pids"] == state["pids"]


def test_script_stop_leaves_nothing(tmp_path):
    d = tmp_path / "s3"
    info = rgw.start(d)
    try:
        pids = json.loads((d / "state.json").read_text())["pids"]
        assert sorted(pids) == ["mon", "osd", "rgw"]
        assert all(Path(f"/proc/{p}").exists() for p in pids.values())
        c = rgw.boto3_client(info)
        c.create_bucket(Bucket="stop-test")
        c.put_object(Bucket="stop-test", Key="k", Body=b"v")
    finally:
        rgw.stop(d)
    assert not d.exists()
    deadline = time.monotonic() + 10                # SIGKILLed; gone once reaped
    alive = []
    while time.monotonic() < deadline:
        alive = [p for p in pids.values() if _running(p)]
        if not alive:
            break
        time.sleep(0.05)
    assert alive == []
    assert _script("status", "--dir", str(d)).returncode == 1


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
