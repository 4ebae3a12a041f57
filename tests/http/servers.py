"""Web servers for the http(s):// dataset tests (tests/python/test_http.py), on loopback only.

- `Nginx`: Debian's nginx serving a directory, as a user would publish a dataset: plain HTTP,
  HTTPS with a self-signed certificate (the CA handed to stoker through SSL_CERT_FILE), and a
  location with `max_ranges 0`, where nginx answers every range request with the whole file.
- `FlakyServer`: a server that breaks off answers half-way (Content-Length promised, connection
  closed early), the first `truncate` times or always: what a proxy or an overloaded server does.
  nginx cannot be told to do that, so this one is Python's http.server with ranges added.
"""
from __future__ import annotations

import http.server
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path


def available() -> str | None:
    """None if nginx and openssl are here, else why not."""
    for tool in ("nginx", "openssl"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (scripts/setup installs it)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    def __init__(self, root: Path, work: Path):
        self.root, self.work = root, work
        self.port, self.tls_port = free_port(), free_port()
        self.ca = work / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(work / "key.pem"), "-out", str(self.ca)],
                       check=True, capture_output=True)
        # nginx writes its temporary files under the prefix it was built with unless told.
        temp = []
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (work / kind).mkdir(exist_ok=True)
            temp.append(f"  {kind}_temp_path {work / kind};")
        temp_paths = "\n".join(temp)
        conf = work / "nginx.conf"
        conf.write_text(f"""
user root;
worker_processes 2;
pid {work / 'nginx.pid'};
error_log {work / 'error.log'};
events {{ worker_connections 256; }}
http {{
  access_log {work / 'access.log'};
{temp_paths}
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
    location /whole/ {{ alias {root}/; max_ranges 0; }}
  }}
  server {{
    listen 127.0.0.1:{self.tls_port} ssl;
    ssl_certificate {self.ca};
    ssl_certificate_key {work / 'key.pem'};
    root {root};
  }}
}}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-e", str(work / "error.log"), "-c", str(conf),
                                      "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1), \
                        socket.create_connection(("127.0.0.1", self.tls_port), timeout=1):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("nginx did not start: "
                                       + (work / "error.log").read_text(errors="replace")[-2000:])
                time.sleep(0.05)

    def url(self, path: str, *, tls: bool = False, whole: bool = False) -> str:
        if tls:
            return f"https://127.0.0.1:{self.tls_port}/{path}"
        return f"http://127.0.0.1:{self.port}/{'whole/' if whole else ''}{path}"

    def access_log(self) -> str:
        return (self.work / "access.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: workers finish and exit
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FlakyServer:
    """Serves `root` with byte ranges; the first `truncate` answers with a body (or all of
    them, truncate=-1) stop half-way, after promising the whole length."""

    def __init__(self, root: Path, truncate: int):
        self.root, self.truncate, self.truncated = root, truncate, 0
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def file(self) -> Path | None:
                path = (server.root / self.path.lstrip("/")).resolve()
                if not path.is_relative_to(server.root.resolve()) or not path.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return path

            def do_HEAD(self):
                path = self.file()
                if path is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(path.stat().st_size))
                    self.end_headers()

            def do_GET(self):
                path = self.file()
                if path is None:
                    return
                data = path.read_bytes()
                status = 200
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    first, last = rng[len("bytes="):].split("-")
                    data = data[int(first):int(last) + 1]
                    status = 206
                with server.lock:
                    cut = server.truncate < 0 or server.truncated < server.truncate
                    if cut and len(data) > 1:
                        server.truncated += 1
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut and len(data) > 1:
                    self.wfile.write(data[:len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                else:
                    self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

