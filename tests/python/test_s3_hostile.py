"""An S3 endpoint that misbehaves (issue 14, item 3: sizes from untrusted answers): a listing
that repeats its continuation token forever, a Content-Length that is not a number, a body
without a length that never ends. stoker must answer each with a clear error, never hang, grow without
bound or crash. The endpoint is a few lines of http.server on loopback, not a real gateway:
no real one misbehaves on purpose."""
from __future__ import annotations

import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

VERSION_KEY = "ds/versions/0000000000000001.version"


class Hostile(BaseHTTPRequestHandler):
    mode = "repeat_token"

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        headers = {"Content-Length": str(len(body)), **(headers or {})}
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        if self.mode == "endless_body":  # a listing without a length that never ends
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * (1 << 20))
            except OSError:
                pass
        elif "list-type=2" in self.path:
            truncated = self.mode == "repeat_token"
            xml = ("<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name>"
                   f"<Contents><Key>{VERSION_KEY}</Key><Size>10</Size></Contents>"
                   f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
                   + ("<NextContinuationToken>again</NextContinuationToken>" if truncated else "")
                   + "</ListBucketResult>").encode()
            self._answer(xml)
        else:
            self._answer(b"0123456789")

    def do_HEAD(self):
        self._answer(b"", {"Content-Length": "12abc" if self.mode == "bad_length" else "10"})


@pytest.fixture
def hostile(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{server.server_address[1]}",
               AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_REGION="us-east-1")
    env.pop("AWS_PROFILE", None)
    yield env
    server.shutdown()


@pytest.mark.parametrize("mode, command, message", [
    ("repeat_token", ["versions", "s3://bkt/ds"], "repeats its continuation token 'again'"),
    ("bad_length", ["verify", "s3://bkt/ds"], "Content-Length '12abc' is not a size"),
    ("endless_body", ["versions", "s3://bkt/ds"], "over 67108864 bytes undeclared"),
])
def test_a_hostile_endpoint_gets_a_clear_error(hostile, stoker_exe, mode, command, message):
    Hostile.mode = mode
    proc = subprocess.run([stoker_exe, *command], capture_output=True, text=True, timeout=120,
                          env=hostile)
    assert proc.returncode in (1, 3), (proc.returncode, proc.stderr)
    assert message in proc.stderr, proc.stderr
