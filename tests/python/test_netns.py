"""Multi-host tests on the network-namespace testbed (tests/netns/testbed.py).

Each test builds its own little network (a switch and 2-4 hosts, each a network namespace), so
they need root and `ip netns`; without either they are skipped. The relay tests need the
stoker_delay_relay binary (built with the unit tests); the `stoker serve` test needs the stoker
CLI with the serve subcommand.

What is asserted is behaviour, never speed: bytes arrive intact through shaped links and the
relay; the relay delays a round trip by at least twice its one-way delay (a lower bound is a
correctness property of a delay line); fault modes cut or corrupt exactly where asked; and the
testbed leaves no namespace, interface or process behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "netns"))
import testbed as tbm  # noqa: E402
from testbed import Testbed, netns_unavailable, pattern, transfer  # noqa: E402

from conftest import STOKER, make_tree  # noqa: E402




_REASON = netns_unavailable()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


@pytest.fixture(scope="module")
def relay_exe() -> str:
    exe = tbm.find_relay()
    if exe is None:
        pytest.skip("stoker_delay_relay is not built: `ninja -C build stoker_delay_relay` "
                    "(STOKER_TESTS=ON), or point STOKER_DELAY_RELAY at it")
    return exe


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


def _namespaces(prefix: str) -> list[str]:
    return [ns for ns in tbm.list_namespaces() if ns.startswith(prefix + "--")]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- topology and shaping ----------------------------------------------------------------------

def test_hosts_reach_each_other_and_nothing_else():
    with Testbed("stkt-ping", ["storage", "node1", "node2", "node3"]) as tb:
        for a in tb:
            for b in tb:
                if a is not b:
                    assert a.ping(b.ip), f"{a} cannot reach {b}"
            assert a.ping(tb.switch.ip)
            # Loopback is up, and the host's only other interface is its link to the switch.
            assert a.ping("127.0.0.1")
            links = a.run(["ip", "-o", "link", "show"]).stdout
            assert sorted(line.split(":")[1].strip().split("@")[0]
                          for line in links.splitlines()) == ["eth0", "lo"]
        # No route out of the testbed: the machine's own network is not reachable.
        routes = tb["node1"].run(["ip", "route"]).stdout
        assert "default" not in routes
        assert not tb["node1"].ping("10.255.255.1", timeout=0.3)
        # Addresses: 10.X.0.k/24 on the hosts, .254 on the switch.
        assert [h.ip for h in tb] == [f"10.{tb.subnet}.0.{k}" for k in (1, 2, 3, 4)]


@pytest.mark.parametrize("shaper", ["tbf", "htb"])
def test_shaped_link_delivers_every_byte(shaper):
    with Testbed("stkt-shape", ["a", "b"], rate="1gbit", shaper=shaper) as tb:
        a, b = tb["a"], tb["b"]
        # Both ends of both links carry the shaper.
        for ns, dev in ((a.ns, "eth0"), (b.ns, "eth0"), (tb.switch.ns, a.port),
                        (tb.switch.ns, b.port)):
            qdisc = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev],
                                   capture_output=True, text=True).stdout
            assert f"qdisc {shaper}" in qdisc, (ns, dev, qdisc)
        n = 24 << 20
        result = transfer(a, b, n, seed=7)
        assert result["error"] is None and result["sender_rc"] == 0
        assert result["bytes"] == n
        assert result["sha256"] == _sha(pattern(n, seed=7))
        # And back the other way, after changing the shaping at run time.
        tb.shape(a, "200mbit")
        result = transfer(b, a, 4 << 20, seed=8)
        assert result["sha256"] == _sha(pattern(4 << 20, seed=8))
        tb.unshape(a)
        assert "tbf" not in subprocess.run(["tc", "-n", a.ns, "qdisc"], capture_output=True,
                                           text=True).stdout


# -- the delaying relay ------------------------------------------------------------------------

def test_relay_forwards_intact_and_delays_each_direction(relay_exe):
    with Testbed("stkt-relay", ["storage", "node"]) as tb:
        storage, node = tb["storage"], tb["node"]
        n = 16 << 20
        relay = tb.relay(storage, 5201, delay_ms=2, binary=relay_exe)
        result = transfer(node, storage, n, via=relay.address, seed=3)
        assert result["bytes"] == n and result["sha256"] == _sha(pattern(n, seed=3))

        tbm.start_echo(storage, 5300)
        direct = tbm.round_trips(node, f"{storage.ip}:5300", 5)
        assert len(direct) == 5
        # Round trips through the relay take at least up + down delay (a lower bound only: the
        # machine may be slow, but a delay line must never deliver early).
        for up, down in ((5, 5), (1, 8), (0, 0)):
            echo = tb.relay(storage, 5300, up_delay_ms=up, down_delay_ms=down, binary=relay_exe)
            rtts = tbm.round_trips(node, echo.address, 10)
            assert len(rtts) == 10
            assert min(rtts) >= (up + down) / 1000, (up, down, rtts)
            echo.stop()
        # The relay runs on the switch, and its log names each connection's byte counts.
        assert relay.ip == tb.switch.ip
        assert f"up {n} bytes" in relay.wait_for_log(f"up {n} bytes")


def test_relay_bandwidth_cap_keeps_bytes_intact(relay_exe):
    with Testbed("stkt-relay-rate", ["a", "b"]) as tb:
        relay = tb.relay(tb["b"], 5201, delay_ms=1, rate_mbit=200, binary=relay_exe)
        n = 3 << 20
        result = transfer(tb["a"], tb["b"], n, via=relay.address, seed=4)
        assert result["bytes"] == n and result["sha256"] == _sha(pattern(n, seed=4))


def test_relay_drop_after_cuts_the_stream_at_exactly_n_bytes(relay_exe, tmp_path):
    with Testbed("stkt-drop", ["a", "b"]) as tb:
        cut = 1_000_003
        relay = tb.relay(tb["b"], 5201, delay_ms=1, drop_after=cut, fault_direction="up",
                         binary=relay_exe)
        saved = tmp_path / "got"
        result = transfer(tb["a"], tb["b"], 4 << 20, via=relay.address, seed=5, save=str(saved))
        assert result["bytes"] == cut
        assert saved.read_bytes() == pattern(cut, seed=5)
        assert f"up {cut} bytes" in relay.wait_for_log(f"up {cut} bytes")


def test_relay_drop_after_in_the_answer_direction(relay_exe):
    # "down" (target → client), the default: a client reading from a server sees exactly N
    # bytes and then the end of the stream.
    code = r"""
import socket, sys, threading
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
data = bytes(range(256)) * 4096
threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)),
                 daemon=True).start()
got = bytearray()
try:
    while (b := s.recv(65536)):
        got += b
except OSError:
    pass
print(len(got), got == data[:len(got)])
"""
    with Testbed("stkt-drop-down", ["srv", "cli"]) as tb:
        tbm.start_echo(tb["srv"], 5300)
        relay = tb.relay(tb["srv"], 5300, drop_after=123_457, binary=relay_exe)
        ip, port = relay.address.split(":")
        assert tb["cli"].python(code, ip, port).stdout.split() == ["123457", "True"]


def test_relay_corrupts_one_byte_at_offset(relay_exe, tmp_path):
    with Testbed("stkt-corrupt", ["a", "b"]) as tb:
        n, at = 2 << 20, 777_777
        relay = tb.relay(tb["b"], 5201, delay_ms=1, corrupt_at=at, fault_direction="up",
                         fault_connections=1, binary=relay_exe)
        saved = tmp_path / "got"
        result = transfer(tb["a"], tb["b"], n, via=relay.address, seed=6, save=str(saved))
        got, want = saved.read_bytes(), pattern(n, seed=6)
        assert result["bytes"] == n and len(got) == n
        assert [i for i in range(0, n, 4096) if got[i:i + 4096] != want[i:i + 4096]] == \
            [at // 4096 * 4096]
        assert got[at] == want[at] ^ 0xFF
        assert got[:at] == want[:at] and got[at + 1:] == want[at + 1:]
        # fault_connections=1: the second connection is left alone.
        result = transfer(tb["a"], tb["b"], n, via=relay.address, seed=6)
        assert result["sha256"] == _sha(want)


# -- cleanup -----------------------------------------------------------------------------------

def test_cleanup_after_failure_leaves_nothing_behind(relay_exe):
    before = _root_links()
    procs = []
    with pytest.raises(RuntimeError, match="boom"):
        with Testbed("stkt-clean", 3, rate="500mbit") as tb:
            procs.append(tb["h1"].popen(["sleep", "1000"]))
            # A grandchild in its own session: not tracked, still inside the namespace.
            tb["h2"].run("setsid sleep 1000 >/dev/null 2>&1 < /dev/null &")
            procs.append(tb.relay(tb["h3"], 5201, delay_ms=1, binary=relay_exe).proc)
            assert len(_namespaces("stkt-clean")) == 4
            raise RuntimeError("boom")
    assert _namespaces("stkt-clean") == []
    assert _root_links() == before
    assert all(p.poll() is not None for p in procs)
    assert not Path("/tmp/stkt-clean-work").exists()


def test_start_removes_leftovers_of_a_killed_run():
    # What a SIGKILLed run leaves: namespaces with the prefix, a veth pair, a process inside.
    prefix = "stkt-stale"
    for name in ("stkt-stale--sw", "stkt-stale--h1"):
        subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", "stkt-stale--sw", "link", "add", "p1", "type", "veth", "peer",
                    "name", "eth0", "netns", "stkt-stale--h1"], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", "stkt-stale--h1", "sleep", "1000"],
                              start_new_session=True)
    # Another prefix that merely starts the same way is not ours to remove.
    subprocess.run(["ip", "netns", "add", "stkt-stale-x--sw"], check=True)
    try:
        with Testbed(prefix, 2) as tb:
            assert sorted(_namespaces(prefix)) == ["stkt-stale--h1", "stkt-stale--h2",
                                                   "stkt-stale--sw"]
            assert orphan.wait(timeout=10) == -signal.SIGKILL
            assert tb["h1"].ping(tb["h2"].ip)
        assert _namespaces(prefix) == []
        assert "stkt-stale-x--sw" in tbm.list_namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", "stkt-stale-x--sw"], capture_output=True)
        if orphan.poll() is None:
            orphan.kill()
        tbm.remove_stale(prefix)


def test_a_live_testbed_is_not_mistaken_for_leftovers():
    with Testbed("stkt-lock", 2) as tb:
        with pytest.raises(tbm.TestbedError, match="in use by another live testbed"):
            Testbed("stkt-lock", 2, lock_timeout=0.3).start()
        assert len(_namespaces("stkt-lock")) == 3
        assert tb["h1"].ping(tb["h2"].ip)
    # Released with the testbed: the prefix can be used again at once.
    with Testbed("stkt-lock", 1, lock_timeout=0):
        assert len(_namespaces("stkt-lock")) == 2


def test_sigterm_unwinds_and_cleans_up(tmp_path):
    # A process running a testbed is sent SIGTERM: the `with` block unwinds and cleans up.
    script = tmp_path / "victim.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(tbm.__file__).parent)!r})\n"
        "from testbed import Testbed\n"
        "with Testbed('stkt-term', 2) as tb:\n"
        "    tb['h1'].popen(['sleep', '1000'])\n"
        "    print('up', flush=True)\n"
        "    time.sleep(1000)\n")
    victim = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "up"
        assert len(_namespaces("stkt-term")) == 3
        victim.send_signal(signal.SIGTERM)
        assert victim.wait(timeout=30) == 128 + signal.SIGTERM
        assert _namespaces("stkt-term") == []
    finally:
        if victim.poll() is None:
            victim.kill()
        tbm.remove_stale("stkt-term")


# -- stoker serve across hosts -----------------------------------------------------------------

def _has_serve() -> str | None:
    if STOKER is None:
        return "the stoker CLI is not installed (pip install --no-build-isolation .)"
    try:
        help_run = subprocess.run([STOKER, "serve", "--help"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`stoker serve --help` failed: {e}"
    if help_run.returncode != 0:
        return ("this stoker CLI has no `serve` subcommand yet (rebuild: .venv/bin/pip install "
                "--no-build-isolation .)")
    return None


# Reads every file of a dataset URI; prints {path: sha256} as JSON.
_READ_ALL = r"""
import hashlib, json, sys
import stoker
ds = stoker.Dataset(sys.argv[1])
out = {}
for i in range(ds.num_files):
    out[ds.stat(i)["path"]] = hashlib.sha256(ds.read(i)).hexdigest()
print(json.dumps(out))
"""


def test_stoker_serve_to_two_nodes_direct_and_delayed(tmp_path, relay_exe):
    reason = _has_serve()
    if reason:
        pytest.skip(reason)
    import stoker

    tree = make_tree(tmp_path / "src", seed=4242, classes=4, files_per_class=30,
                     max_size=60_000)
    stoker.pack(str(tmp_path / "src"), str(tmp_path / "ds"), chunk_size=64 << 10)
    want = {path: _sha(data) for path, data in tree.items()}
    secret = tmp_path / "secret"
    secret.write_text("netns-test-secret-0123456789abcdef")
    secret.chmod(0o600)
    env = dict(os.environ, STOKER_SECRET_FILE=str(secret))

    with Testbed("stkt-serve", ["storage", "node1", "node2"], rate="1gbit") as tb:
        storage = tb["storage"]
        server = storage.popen([STOKER, "serve", "--listen", f"{storage.ip}:7070",
                                "--dataset", f"train={tmp_path / 'ds'}",
                                "--secret-file", str(secret)],
                               stderr=subprocess.PIPE, text=True)
        tbm.wait_for_port(tb["node1"], storage.ip, 7070)
        relay = tb.relay(storage, 7070, delay_ms=2, binary=relay_exe)
        for via in (f"{storage.ip}:7070", relay.address):
            # Both nodes at once, as two trainers would.
            readers = [node.popen([sys.executable, "-c", _READ_ALL, f"stoker://{via}/train"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)
                       for node in (tb["node1"], tb["node2"])]
            for node, reader in zip(("node1", "node2"), readers):
                out, err = reader.communicate(timeout=120)
                assert reader.returncode == 0, f"{node} via {via}: {err}"
                assert json.loads(out) == want, f"{node} via {via} read different bytes"

        # A client without the secret is refused, not served.
        refused = tb["node1"].run([sys.executable, "-c", _READ_ALL, f"stoker://{via}/train"],
                                  check=False, env=dict(os.environ, STOKER_SECRET="x" * 32))
        assert refused.returncode != 0

        # Faults on the answer stream never turn into wrong bytes. One broken connection: the
        # client retries on a new one and reads everything. Every connection broken: a clean
        # error naming the failure.
        for fault in (dict(corrupt_at=20_000), dict(drop_after=30_000)):
            once = tb.relay(storage, 7070, fault_connections=1, binary=relay_exe, **fault)
            got = tb["node2"].run([sys.executable, "-c", _READ_ALL,
                                   f"stoker://{once.address}/train"], env=env, timeout=120)
            assert json.loads(got.stdout) == want, fault
            always = tb.relay(storage, 7070, binary=relay_exe, **fault)
            got = tb["node2"].run([sys.executable, "-c", _READ_ALL,
                                   f"stoker://{always.address}/train"],
                                  check=False, env=env, timeout=120)
            assert got.returncode != 0 and got.stdout == "", fault
            assert ("CRC mismatch" if "corrupt_at" in fault else "connection closed") \
                in got.stderr, got.stderr

        storage.kill(server, signal.SIGTERM)
        assert server.returncode == 0, server.stderr.read()
