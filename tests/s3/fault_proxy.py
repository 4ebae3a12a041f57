"""A fault-injecting HTTP/1.1 reverse proxy for S3 tests (stdlib only).

Sits between an S3 client (stoker, boto3) and a real gateway (tests/s3/rgw.py) and passes every
request through byte for byte, except where a rule says to break it:

    from fault_proxy import FaultProxy, Rule
    proxy = FaultProxy("127.0.0.1", 8000, [
        Rule("slowdown", method="GET", path="/chunks/", times=2, per_key=True),
        Rule("truncate", method="GET", path="/chunks/", probability=0.3, seed=7),
    ])
    proxy.start()
    env["AWS_ENDPOINT_URL"] = f"http://{proxy.address}"    # "127.0.0.1:PORT"
    ...
    proxy.counters        # {"requests": 41, "forwarded": 37, "faults": {"slowdown": 4}, ...}
    proxy.stop()

The request bytes go upstream unchanged, the Host header included: a SigV4 client signs `host` =
the proxy's host:port, and the gateway only uses the header to check the signature, so it
verifies. Both sides keep connections alive (one upstream connection per client connection).

Actions (Rule.action):
  "slowdown"       answer 503 SlowDown (an S3 XML error body) without forwarding
  "error"          answer Rule.status / Rule.code (default 500 InternalError), not forwarded
  "reset"          close the client connection with a TCP RST, without answering
  "reset_mid_body" forward, send the headers and half the body, then RST
  "truncate"       forward, send the headers (the true Content-Length) and part of the body
                   (Rule.fraction, default half), then close cleanly (FIN)
  "corrupt"        forward, flip one byte in the middle of the body (same length)
  "delay"          sleep Rule.seconds, then forward normally
  "corrupt_request" flip one byte in the middle of the request body (Content-Length framed,
                   non-empty; others pass unchanged), then forward it and relay the answer
With forward=True, "slowdown", "error" and "reset" first pass the request upstream (so the
gateway has done the work) and then throw its answer away: the lost-answer case.

Matching: Rule.method (None: any), Rule.path (a substring of the request target, query
included), Rule.path_re (a regex searched in it), Rule.header (a header that must be present,
any case), Rule.query (a substring of the query alone). Frequency: `times` (the first N matches;
with per_key=True the first N per distinct request: method + target, query included, so each
object, each part of a multipart upload; the ranged GETs of one object count together), or
`probability` with `seed` (a private random.Random), or neither (every match). The first rule
that fires wins; a rule that matches but does not fire lets the later rules try.

Bodies: requests by Content-Length or chunked (relayed as they came); answers by Content-Length,
chunked (decoded only when a fault needs the body, then re-sent with a Content-Length), or to
the end of the connection. 1xx interim answers (100 Continue) are passed on.
"""
from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO

ACTIONS = ("slowdown", "error", "reset", "reset_mid_body", "truncate", "corrupt", "delay",
           "corrupt_request")
_BODY_ACTIONS = ("reset_mid_body", "truncate", "corrupt")   # need the upstream answer


@dataclass
class Rule:
    action: str
    method: str | None = None
    path: str | None = None
    path_re: str | None = None
    header: str | None = None
    query: str | None = None
    times: int | None = None
    per_key: bool = False
    probability: float | None = None
    seed: int = 0
    forward: bool = False
    status: int = 500
    code: str = "InternalError"
    seconds: float = 0.0
    fraction: float = 0.5
    name: str | None = None             # the key in counters["faults"] (default: action)
    # state
    _seen: dict = field(default_factory=dict, repr=False)
    _rng: random.Random | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r} (one of {ACTIONS})")
        if self.times is not None and self.probability is not None:
            raise ValueError("give times or probability, not both")
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError("fraction must be in [0, 1)")
        self._rng = random.Random(self.seed)
        self._re = re.compile(self.path_re) if self.path_re else None
        if self.name is None:
            self.name = self.action

    def matches(self, method: str, target: str, headers: dict[str, str]) -> bool:
        if self.method is not None and method.upper() != self.method.upper():
            return False
        if self.path is not None and self.path not in target:
            return False
        if self._re is not None and not self._re.search(target):
            return False
        if self.header is not None and self.header.lower() not in headers:
            return False
        if self.query is not None and self.query not in target.partition("?")[2]:
            return False
        return True

    def fires(self, method: str, target: str) -> bool:
        """Called (under the proxy's lock) for a matching request: whether to inject now."""
        if self.times is not None:
            key = (method, target) if self.per_key else None
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            return n < self.times
        if self.probability is not None:
            return self._rng.random() < self.probability
        return True


class _Closed(Exception):
    """The peer closed the connection (cleanly, between messages, or not)."""


def _read_head(f: BinaryIO) -> bytes:
    """One message head (start line + headers + blank line), raw; _Closed at EOF before it."""
    lines = []
    total = 0
    while True:
        line = f.readline(65537)
        if not line:
            raise _Closed("EOF" if not lines else "EOF inside a message head")
        if not lines and line in (b"\r\n", b"\n"):
            continue                                    # stray CRLF between messages
        lines.append(line)
        total += len(line)
        if total > 1 << 20:
            raise ValueError("message head over 1 MiB")
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    text = head.decode("latin-1")
    lines = text.split("\r\n") if "\r\n" in text else text.split("\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise _Closed(f"EOF after {0 if data is None else len(data)} of {n} body bytes")
    return data


def _read_chunked(f: BinaryIO) -> tuple[bytes, bytes]:
    """A chunked body: (the raw bytes as sent, the decoded payload)."""
    raw, payload = [], []
    while True:
        size_line = f.readline(65537)
        if not size_line:
            raise _Closed("EOF in a chunked body")
        raw.append(size_line)
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:                                     # trailers, then the blank line
                line = f.readline(65537)
                if not line:
                    raise _Closed("EOF in chunked trailers")
                raw.append(line)
                if line in (b"\r\n", b"\n"):
                    return b"".join(raw), b"".join(payload)
        data = _read_exact(f, size)
        crlf = f.readline(3)
        raw += [data, crlf]
        payload.append(data)


def _is_chunked(headers: dict[str, str]) -> bool:
    return "chunked" in headers.get("transfer-encoding", "").lower()


class _Response:
    def __init__(self, head: bytes, status: int, headers: dict[str, str], raw_body: bytes,
                 body: bytes, chunked: bool, close: bool) -> None:
        self.head, self.status, self.headers = head, status, headers
        self.raw_body, self.body, self.chunked, self.close = raw_body, body, chunked, close


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, rules: list[Rule] | None = None,
                 listen_host: str = "127.0.0.1", listen_port: int = 0) -> None:
        self.target = (target_host, int(target_port))
        self.rules: list[Rule] = list(rules or [])
        self._listen = (listen_host, listen_port)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._requests = 0
        self._forwarded = 0
        self._faults: dict[str, int] = {}
        self._by_method: dict[str, int] = {}
        self._errors: list[str] = []
        # [method, target, action or "ok", status sent or None], one per request
        self.log: list[list] = []

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> "FaultProxy":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(self._listen)
        s.listen(128)
        self._sock = s
        t = threading.Thread(target=self._accept_loop, name="fault-proxy-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def address(self) -> str:
        assert self._sock is not None, "start() first"
        host, port = self._sock.getsockname()[:2]
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def counters(self) -> dict:
        with self._lock:
            return {"requests": self._requests, "forwarded": self._forwarded,
                    "faults": dict(self._faults), "by_method": dict(self._by_method),
                    "proxy_errors": list(self._errors)}

    def set_rules(self, rules: list[Rule]) -> None:
        with self._lock:
            self.rules = list(rules)

    # -- the work ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name="fault-proxy-conn")
            t.start()
            self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _serve(self, conn: socket.socket) -> None:
        rfile = conn.makefile("rb")
        up: list = [None, None]                 # upstream socket, its reader
        try:
            while not self._stopping.is_set():
                try:
                    head = _read_head(rfile)
                except (_Closed, OSError):
                    return
                start_line, headers = _parse_head(head)
                parts = start_line.split(" ")
                if len(parts) < 3:
                    return
                method, target = parts[0].upper(), parts[1]
                if _is_chunked(headers):
                    raw_body, _ = _read_chunked(rfile)
                    body_len = 0                 # not corrupted in place: chunked framing
                else:
                    raw_body = _read_exact(rfile, int(headers.get("content-length", "0") or 0))
                    body_len = len(raw_body)
                request = head + raw_body
                client_close = "close" in headers.get("connection", "").lower()
                rule = self._choose(method, target, headers)
                entry = [method, target, rule.action if rule else "ok", None]
                with self._lock:
                    self.log.append(entry)
                if not self._handle(conn, up, request, body_len, method, target, rule, entry):
                    return                       # the fault closed the client connection
                if client_close:
                    return
        except (_Closed, OSError):
            pass                                 # a peer went away: end this connection
        except Exception as e:  # noqa: BLE001 - a proxy bug must show, not hang the client
            with self._lock:
                self._errors.append(f"{type(e).__name__}: {e}")
        finally:
            self._close_upstream(up)
            try:
                rfile.close()
                conn.close()
            except OSError:
                pass
            with self._lock:
                self._conns.discard(conn)

    def _choose(self, method: str, target: str, headers: dict[str, str]) -> Rule | None:
        with self._lock:
            self._requests += 1
            self._by_method[method] = self._by_method.get(method, 0) + 1
            for rule in self.rules:
                if rule.matches(method, target, headers) and rule.fires(method, target):
                    self._faults[rule.name] = self._faults.get(rule.name, 0) + 1
                    return rule
        return None

    def _handle(self, conn: socket.socket, up: list, request: bytes, body_len: int, method: str,
                target: str, rule: Rule | None, entry: list) -> bool:
        """Answers one request; False when the client connection must end. Sets entry[3] to the
        status the client was sent (None: no answer)."""
        action = rule.action if rule else "ok"
        if action == "delay":
            time.sleep(rule.seconds)
        if action in ("slowdown", "error", "reset"):
            if rule.forward:
                self._forward(up, request, method, relay_to=conn)
            if action == "reset":
                _reset(conn)
                return False
            status, code = (503, "SlowDown") if action == "slowdown" else (rule.status, rule.code)
            entry[3] = status
            conn.sendall(_error_answer(method, target, status, code))
            return True
        if action == "corrupt_request" and body_len > 0:
            at = len(request) - body_len + body_len // 2
            request = request[:at] + bytes([request[at] ^ 0xFF]) + request[at + 1:]
        resp = self._forward(up, request, method, relay_to=conn)
        entry[3] = resp.status
        if action not in _BODY_ACTIONS or not resp.body:
            self._send(conn, resp)
            return not resp.close
        head = resp.head
        if resp.chunked:                        # re-frame with a Content-Length
            head = _reframe(head, len(resp.body))
        body = resp.body
        if action == "corrupt":
            mid = len(body) // 2
            body = body[:mid] + bytes([body[mid] ^ 0xFF]) + body[mid + 1:]
            conn.sendall(head + body)
            return not resp.close
        cut = int(len(body) * rule.fraction) if action == "truncate" else len(body) // 2
        conn.sendall(head + body[:cut])
        if action == "truncate":
            try:
                conn.shutdown(socket.SHUT_WR)    # FIN: a clean end, too early
            except OSError:
                pass
        else:
            _reset(conn)
        return False

    def _send(self, conn: socket.socket, resp: _Response) -> None:
        conn.sendall(resp.head + resp.raw_body)

    def _forward(self, up: list, request: bytes, method: str, relay_to: socket.socket) -> _Response:
        """Sends the request upstream and reads the final answer (1xx ones go to relay_to)."""
        for attempt in (1, 2):
            fresh = up[0] is None
            if fresh:
                s = socket.create_connection(self.target, timeout=60)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                up[0], up[1] = s, s.makefile("rb")
            try:
                up[0].sendall(request)
                resp = self._read_response(up[1], method, relay_to)
                break
            except (_Closed, ConnectionError) as e:
                # a kept-alive upstream connection the gateway had closed: once more, fresh
                self._close_upstream(up)
                if fresh or attempt == 2:
                    raise _Closed(f"upstream: {e}") from e
        with self._lock:
            self._forwarded += 1
        if resp.close:
            self._close_upstream(up)
        return resp

    def _read_response(self, f: BinaryIO, method: str, relay_to: socket.socket) -> _Response:
        while True:
            head = _read_head(f)
            status_line, headers = _parse_head(head)
            status = int(status_line.split(" ")[1])
            if 100 <= status < 200:
                relay_to.sendall(head)
                continue
            break
        close = ("close" in headers.get("connection", "").lower()
                 or status_line.startswith("HTTP/1.0"))
        chunked = False
        if method == "HEAD" or status in (204, 304):
            raw = body = b""
        elif _is_chunked(headers):
            raw, body = _read_chunked(f)
            chunked = True
        elif "content-length" in headers:
            raw = body = _read_exact(f, int(headers["content-length"]))
        else:
            raw = body = f.read()                # to the end of the connection
            close = True
        return _Response(head, status, headers, raw, body, chunked, close)

    @staticmethod
    def _close_upstream(up: list) -> None:
        if up[0] is not None:
            try:
                up[1].close()
                up[0].close()
            except OSError:
                pass
        up[0] = up[1] = None


def _reset(conn: socket.socket) -> None:
    """Closes with a TCP RST (SO_LINGER 0), as a crashed server or middlebox would."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    except OSError:
        pass


def _reframe(head: bytes, length: int) -> bytes:
    lines = head.split(b"\r\n")
    kept = [ln for ln in lines[:-2] if not ln.lower().startswith(b"transfer-encoding:")]
    kept.append(b"Content-Length: %d" % length)
    return b"\r\n".join(kept) + b"\r\n\r\n"


_error_seq = 0


def _error_answer(method: str, target: str, status: int, code: str) -> bytes:
    global _error_seq
    _error_seq += 1
    reason = {500: "Internal Server Error", 503: "Service Unavailable", 429: "Too Many Requests",
              502: "Bad Gateway", 504: "Gateway Timeout", 403: "Forbidden",
              404: "Not Found"}.get(status, "Error")
    resource = target.partition("?")[0]
    messages = {"SlowDown": "Please reduce your request rate.",
                "InternalError": "We encountered an internal error. Please try again."}
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{messages.get(code, code)} (injected by fault_proxy)</Message>"
            f"<Resource>{resource}</Resource><RequestId>fault-proxy-{_error_seq}</RequestId>"
            f"</Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"x-amz-request-id: fault-proxy-{_error_seq}\r\n"
            f"Content-Length: {0 if method == 'HEAD' else len(body)}\r\n"
            f"Connection: keep-alive\r\n\r\n").encode()
    return head if method == "HEAD" else head + body
