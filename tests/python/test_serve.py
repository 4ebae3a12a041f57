"""`stoker serve` as a subprocess, read through stoker:// URIs from the Python API."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from conftest import dataset_contents, free_port, make_tree

SECRET = "a shared secret for the serve tests"


@pytest.fixture
def served(tmp_path, stoker_exe, monkeypatch):
    """(uri, tree, server process, metrics port) for a packed tree served on an ephemeral port."""
    import stoker
    tree = make_tree(tmp_path / "src", seed=77, classes=4, files_per_class=15, max_size=30_000)
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"), chunk_size=16_384)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    metrics_port = free_port()
    proc = subprocess.Popen(
        [stoker_exe, "serve", "--listen", "127.0.0.1:0", "--dataset", f"mnist={tmp_path / 'ds'}",
         "--secret-file", str(secret_file), "--metrics-port", str(metrics_port)],
        stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.match(r"serving 1 dataset\(s\) on 127\.0\.0\.1:(\d+)", line)
    assert m, f"unexpected first line from stoker serve: {line!r}"
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret_file))
    yield f"stoker://127.0.0.1:{m.group(1)}/mnist", tree, proc, metrics_port
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_dataset_and_loader_over_the_network(served):
    import stoker
    uri, tree, proc, metrics_port = served
    ds = stoker.Dataset(uri)
    assert dataset_contents(ds) == tree
    seen = {}
    for sample in stoker.Loader(uri, shuffle="full", seed=3):
        seen[sample[2]] = sample[0]
    assert len(seen) == len(tree)

    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    text = body.decode()
    reads = re.search(r'^stoker_serve_requests_total\{type="READ"\} (\d+)$', text, re.M)
    assert reads and int(reads.group(1)) > 0
    assert re.search(r"^stoker_serve_connections_accepted_total [1-9]", text, re.M)
    assert "stoker_serve_auth_failures_total 0" in text

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stderr.read() == ""  # nothing per request


def test_idle_metrics_clients_do_not_hold_up_a_scrape(served):
    # Connections that say nothing used to be served one after another, each until its 2 s
    # deadline: ten of them held a scrape for 20 s. They are served side by side now.
    _, _, _, metrics_port = served
    idle = [socket.create_connection(("127.0.0.1", metrics_port)) for _ in range(10)]
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                      timeout=8).read().decode()
        assert "stoker_serve_connections_accepted_total" in body
        for s in idle:  # and each idle one is closed at its deadline, unanswered
            s.settimeout(30)
            assert s.recv(100) == b""
    finally:
        for s in idle:
            s.close()


def test_a_frozen_server_times_out_at_the_one_deadline(served, tmp_path):
    # SIGSTOP: connections are accepted by the kernel, nothing is answered. A client waited
    # 4 tries x 60 s; now every request has one deadline ($STOKER_TIMEOUT, default 30 s) that
    # its retries share.
    uri, tree, proc, _ = served
    path = sorted(tree)[0]
    script = ("import stoker, sys\n"
              "try:\n"
              f"    stoker.Dataset({uri!r}).read({path!r})\n"
              "except TimeoutError as e:\n"
              "    print('TimeoutError', e); sys.exit(3)\n")
    proc.send_signal(signal.SIGSTOP)
    try:
        client = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=90, env={**os.environ, "STOKER_TIMEOUT": "2s"})
    finally:
        proc.send_signal(signal.SIGCONT)
    assert client.returncode == 3, client.stdout + client.stderr
    assert "deadline: 2 s" in client.stdout
    bad = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=90, env={**os.environ, "STOKER_TIMEOUT": "soon"})
    assert "$STOKER_TIMEOUT 'soon'" in bad.stderr


def test_wrong_or_missing_secret(served, monkeypatch):
    import stoker
    uri, _, _, _ = served
    monkeypatch.delenv("STOKER_SECRET_FILE")
    monkeypatch.setenv("STOKER_SECRET", "not the secret the server has")
    with pytest.raises(Exception, match="secrets differ"):
        stoker.Dataset(uri)
    monkeypatch.delenv("STOKER_SECRET")
    with pytest.raises(Exception, match="STOKER_SECRET"):
        stoker.Dataset(uri)


def test_serve_refuses_bad_configurations(tmp_path, stoker_cli, served):
    uri, _, _, _ = served
    short = tmp_path / "short"
    short.write_text("too short")
    short.chmod(0o600)
    proc = stoker_cli("serve", "--listen", "127.0.0.1:0", "--dataset", f"x={tmp_path / 'ds'}",
                      "--secret-file", short, timeout=30)
    assert proc.returncode != 0 and "at least 16" in proc.stderr
    # A secret others can read is refused, as ssh refuses such a private key.
    exposed = tmp_path / "exposed"
    exposed.write_text(SECRET + "\n")
    exposed.chmod(0o644)
    proc = stoker_cli("serve", "--listen", "127.0.0.1:0", "--dataset", f"x={tmp_path / 'ds'}",
                      "--secret-file", exposed, timeout=30)
    assert proc.returncode != 0 and "accessible by group or others (mode 0644)" in proc.stderr \
        and f"chmod 600 {exposed}" in proc.stderr, proc.stderr
    # A FIFO must not hang the server, a huge file must not fill its memory.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    proc = stoker_cli("serve", "--listen", "127.0.0.1:0", "--dataset", f"x={tmp_path / 'ds'}",
                      "--secret-file", fifo, timeout=30)
    assert proc.returncode != 0 and "not a regular file" in proc.stderr, proc.stderr
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of zeros
    huge.chmod(0o600)
    proc = stoker_cli("serve", "--listen", "127.0.0.1:0", "--dataset", f"x={tmp_path / 'ds'}",
                      "--secret-file", huge, timeout=30)
    assert proc.returncode != 0 and "over 65536 bytes" in proc.stderr, proc.stderr
    port = uri.split(":")[2].split("/")[0]
    proc = stoker_cli("serve", "--listen", f"127.0.0.1:{port}", "--dataset",
                      f"x={tmp_path / 'ds'}", "--secret-file", tmp_path / "secret", timeout=30)
    assert proc.returncode != 0 and "already in use" in proc.stderr
