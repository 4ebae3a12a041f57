"""`stoker feed` (issue 39, first step; decision 0013): a feeder process makes slices of a
trainer's batches, byte for byte the images stoker.ImageLoader makes itself.

The client here is written from docs/protocol.md alone (frames, CRC32C, the HMAC handshake,
MAKE and MADE), as another implementation would be, so the test also checks the spec."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import struct
import subprocess

import numpy as np
import pytest

import stoker

pytest.importorskip("torch")  # ImageLoader yields torch tensors

MAGIC = 0x464B5453
HELLO, CHALLENGE, AUTH, WELCOME, STAT, ERROR, MAKE, MADE, JOIN, JOINED = (
    1, 2, 3, 4, 16, 31, 40, 41, 42, 43)
SECRET = b"a feeder test secret of 32 bytes"

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for x in data:
        c = _TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def frame(kind: int, request_id: int, payload: bytes) -> bytes:
    head = struct.pack("<IBBHIII", MAGIC, kind, 0, 0, request_id, len(payload), crc32c(payload))
    return head + struct.pack("<I", crc32c(head)) + payload


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise EOFError("the feeder closed the connection")
        out += got
    return out


def read_frame(s: socket.socket) -> tuple[int, int, bytes]:
    head = recv_exact(s, 24)
    magic, kind, _, _, request_id, length, payload_crc, head_crc = struct.unpack("<IBBHIIII", head)
    assert magic == MAGIC and head_crc == crc32c(head[:20])
    payload = recv_exact(s, length)
    assert payload_crc == crc32c(payload)
    return kind, request_id, payload


def string(s: str) -> bytes:
    return struct.pack("<H", len(s.encode())) + s.encode()


def connect(port: int, key: bytes = SECRET) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    client_nonce = os.urandom(32)
    s.sendall(frame(HELLO, 0, struct.pack("<H", 1) + client_nonce))
    kind, _, p = read_frame(s)
    assert kind == CHALLENGE
    server_nonce, proof = p[2:34], p[34:66]
    expected = hmac.new(key, b"stoker/1 server" + client_nonce + server_nonce, hashlib.sha256)
    if not hmac.compare_digest(proof, expected.digest()):
        s.close()
        raise PermissionError("the feeder does not know this secret")
    s.sendall(frame(AUTH, 0, hmac.new(key, b"stoker/1 client" + server_nonce + client_nonce,
                                      hashlib.sha256).digest()))
    kind, _, p = read_frame(s)
    if kind == ERROR:
        raise PermissionError(p[3:].decode())
    assert kind == WELCOME
    return s


def make(s: socket.socket, request_id: int, uri: str, version: int, seed: int, epoch: int,
         transform: str, samples: list[int]) -> tuple[int, bytes]:
    body = (string(uri) + struct.pack("<QQQ", version, seed, epoch)
            + struct.pack("<I", len(transform)) + transform.encode() + string("") + string("")
            + struct.pack("<I", len(samples)) + struct.pack(f"<{len(samples)}I", *samples))
    s.sendall(frame(MAKE, request_id, body))
    kind, got_id, payload = read_frame(s)
    assert got_id == request_id
    return kind, payload


def parse_made(payload: bytes) -> tuple[list[tuple[int, int, str]], int, bytes]:
    count, sample_bytes = struct.unpack_from("<II", payload)
    at, samples = 8, []
    for _ in range(count):
        outcome, label, length = struct.unpack_from("<BqH", payload, at)
        at += 11
        samples.append((outcome, label, payload[at:at + length].decode()))
        at += length
    pixels = payload[at:]
    assert len(pixels) == sample_bytes * sum(1 for o, _, _ in samples if o == 0)
    return samples, sample_bytes, pixels


@pytest.fixture
def feeder(tmp_path, stoker_exe):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    proc = subprocess.Popen([stoker_exe, "feed", "--job", "j1", "--listen", "127.0.0.1:0",
                             "--secret-file", str(secret), "--threads", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = json.loads(proc.stdout.readline())
    assert ready["job"] == "j1"
    yield proc, int(ready["listening"].rsplit(":", 1)[1])
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    from test_image_loader import write_photo_tree
    root = tmp_path_factory.mktemp("feed")
    write_photo_tree(root / "src", 30, extra={"c0/cut.jpg": b"\xff\xd8\xff\xe0 truncated"})
    stoker.pack(str(root / "src"), str(root / "ds"), progress=False)
    return str(root / "ds")


def test_a_feeder_makes_the_loaders_pixels(photos, feeder):
    proc, port = feeder
    loader = stoker.ImageLoader(photos, batch_size=8, train=True, size=48, seed=7,
                                dtype="uint8", layout="NHWC", shuffle="sequential",
                                on_error="skip", pin_memory=False)
    loader.set_epoch(2)
    batches = [(images.numpy(), labels.numpy()) for images, labels in loader]
    want = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    ds = stoker.Dataset(photos)
    transform = "train=true\nsize=48, 48\ndtype=uint8\nlayout=NHWC\n"
    s = connect(port)
    made, got_labels, outcomes = [], [], []
    n = len(ds)
    for i, begin in enumerate(range(0, n, 7)):  # slices of 7: not the loader's batches of 8
        kind, payload = make(s, i + 1, photos, ds.version, 7, 2, transform,
                             list(range(begin, min(n, begin + 7))))
        assert kind == MADE, payload
        samples, sample_bytes, pixels = parse_made(payload)
        assert sample_bytes == 48 * 48 * 3
        made.append(np.frombuffer(pixels, dtype=np.uint8).reshape(-1, 48, 48, 3))
        got_labels += [label for outcome, label, _ in samples if outcome == 0]
        outcomes += [(outcome, message) for outcome, _, message in samples if outcome != 0]
    assert np.array_equal(np.concatenate(made), want)
    assert got_labels == labels.tolist()
    assert len(outcomes) == 1 and outcomes[0][0] == 1 and "cut.jpg" in outcomes[0][1]
    # A version the dataset does not have: NotFound (code 1), never another version's images.
    kind, payload = make(s, 99, photos, ds.version + 1, 7, 2, transform, [0])
    assert kind == ERROR and payload[0] == 1
    s.close()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    counters = json.loads(out.strip().splitlines()[-1])
    assert counters["samples"] == n and counters["failed_samples"] == 1


def test_a_feeder_refuses_a_trainer_of_another_build(feeder):
    _, port = feeder
    s = connect(port)
    mine = stoker._core.maker_version()
    s.sendall(frame(JOIN, 1, string(mine)))
    kind, request_id, payload = read_frame(s)
    assert (kind, request_id, payload) == (JOINED, 1, string(mine))
    other = "stoker 0.0.1; libjpeg-turbo 1.0.0; libpng 1.0.0"
    s.sendall(frame(JOIN, 2, string(other)))
    kind, request_id, payload = read_frame(s)
    assert kind == ERROR and request_id == 2 and payload[0] == 10  # Unsupported
    message = payload[3:].decode()
    assert mine in message and other in message, message
    s.close()


def test_a_feeder_refuses_another_jobs_secret(feeder):
    _, port = feeder
    with pytest.raises(PermissionError):
        connect(port, b"another job's secret, 32 bytes!")
    s = connect(port)  # the job's own still works
    s.sendall(frame(STAT, 1, string("x") + string("versions")))
    kind, _, payload = read_frame(s)
    assert kind == ERROR and payload[0] == 1  # a feeder exports no dataset
    s.close()


def test_feed_refuses_bad_configurations(tmp_path, stoker_exe):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o644)
    r = subprocess.run([stoker_exe, "feed", "--job", "j", "--listen", "127.0.0.1:0",
                        "--secret-file", str(secret)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "accessible by group or others" in r.stderr
    r = subprocess.run([stoker_exe, "feed", "--listen", "127.0.0.1:0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "--job" in r.stderr
