"""A multi-host network testbed on one Linux machine, built from network namespaces.

Used by the multi-host tests (tests/python/test_netns.py) and benchmarks: a storage server and
several training nodes, each in its own network namespace, talking over real TCP through veth
links, with optional bandwidth shaping per link and a userspace relay that adds latency (the
kernel here has no `tc netem`; see /work/shared/TESTBED.md).

Topology (a star around one switch):

    namespace PREFIX--sw:   br0 (a Linux bridge, 10.X.0.254/24) with ports p1 .. pN
    namespace PREFIX--NAME: lo, eth0 = 10.X.0.k/24, the other end of veth pk

Every host reaches every other host at layer 2 through the bridge; the switch namespace also has
an address, so processes can run "on the switch" (the delay relay does by default) and reach all
hosts. Nothing is routed anywhere else: the namespaces have no link to the machine's own network
namespace, so their addresses cannot clash with the machine's networks. X (100..199, from a hash
of the prefix) also skips any 10.X/16 the machine itself uses, so addresses in logs are never
ambiguous.

Shaping (`rate=`/`burst=`, or Testbed.shape) puts a tbf (or htb) qdisc on both ends of a host's
veth link: eth0 egress shapes host → switch, pk egress shapes switch → host. A transfer A → B
therefore crosses A's uplink shaper and B's downlink shaper, like two NICs on a switch.

Latency: Testbed.relay() starts `stoker_delay_relay` (src/testing/delay_relay.cc) in a namespace
(the switch by default): clients connect to the returned address and the relay forwards to the
target host's port, delaying each direction by a fixed time and optionally cutting or corrupting
the stream.

One prefix, one live testbed: a testbed holds an flock on /tmp/stoker-testbed-locks/PREFIX.lock
while it is up (the kernel drops it when the process dies, however it dies). A second Testbed
with the same prefix waits for it (lock_timeout, then TestbedError) instead of mistaking a live
run's namespaces for leftovers; tests running concurrently should still use distinct prefixes.

Cleanup is guaranteed in the ways that can be guaranteed: leaving the `with` block (normally, by
exception or by Ctrl-C), SIGTERM while the testbed is up (turned into SystemExit), and interpreter
exit (atexit) all kill every process inside the namespaces (not only the ones started here) and
delete the namespaces, which destroys their veths and the bridge. After SIGKILL, the next
Testbed with the same prefix removes what the dead one left (namespaces named PREFIX--*).
Nothing outside the namespaces created here is ever touched.

Needs root and iproute2 (`ip`, `tc`); stdlib only. Not thread-safe: use one Testbed from one
thread (the processes it starts run concurrently, of course).
"""
from __future__ import annotations

import atexit
import fcntl
import glob
import hashlib
import ipaddress
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_SEP = "--"  # prefix and host name may hold single hyphens; this separates them unambiguously


class TestbedError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise TestbedError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _tc(ns: str, *args: str) -> None:
    proc = subprocess.run(["tc", "-n", ns, *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise TestbedError(f"tc -n {ns} {' '.join(args)}: {proc.stderr.strip()}")


def list_namespaces() -> list[str]:
    """Names from `ip netns list` (which prints "name (id: N)" for namespaces with an id)."""
    out = _ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _namespace_pids(ns: str) -> list[int]:
    proc = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _destroy_namespace(ns: str) -> None:
    """Kills every process in `ns` (SIGKILL: cleanup must not wait on a stuck process), then
    deletes it. The namespace, and with it its veth ends and bridge, dies once it has no
    processes and no mount."""
    for _ in range(50):
        pids = [p for p in _namespace_pids(ns) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    _ip("netns", "del", ns, check=False)


def remove_stale(prefix: str) -> list[str]:
    """Deletes every namespace PREFIX--* (left by a testbed that was killed). Returns them."""
    stale = [ns for ns in list_namespaces()
             if ns.startswith(prefix + _SEP) and _SEP not in ns[len(prefix) + len(_SEP):]]
    for ns in stale:
        _destroy_namespace(ns)
    return stale


def _used_networks() -> list[ipaddress.IPv4Network]:
    """IPv4 networks the machine's own namespace has addresses or routes in."""
    nets = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        out = _ip(*args, check=False).stdout
        for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b", out):
            try:
                nets.append(ipaddress.ip_network(token, strict=False))
            except ValueError:
                pass
    return nets


def choose_subnet(prefix: str) -> int:
    """X for 10.X.0.0/24: stable for a prefix, and clear of every network in use here."""
    used = _used_networks()
    start = int.from_bytes(hashlib.sha256(prefix.encode()).digest()[:2], "little") % 100
    for i in range(100):
        x = 100 + (start + i) % 100
        net = ipaddress.ip_network(f"10.{x}.0.0/16")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return x
    raise TestbedError("no free 10.X.0.0/16 (X in 100..199) on this machine")


def find_relay() -> str | None:
    """The stoker_delay_relay binary: $STOKER_DELAY_RELAY, else the newest one in a build
    directory of this checkout (it is built with the unit tests, STOKER_TESTS=ON)."""
    env = os.environ.get("STOKER_DELAY_RELAY")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = [p for p in glob.glob(str(REPO / "build*" / "src" / "stoker_delay_relay"))
             if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def _signal(proc: subprocess.Popen, sig: int) -> None:
    """Signals proc's process group if it leads one (popen's default), else proc alone: never
    the group of whoever started it."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass


def _as_argv(cmd: str | Sequence[str]) -> list[str]:
    # A string is a shell command line; a sequence is an argv.
    return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]


class Host:
    """One namespace: a host (eth0 on the switch) or the switch itself."""

    def __init__(self, testbed: "Testbed", name: str, ns: str, ip: str, port: str | None):
        self.testbed = testbed
        self.name = name
        self.ns = ns      # network namespace name
        self.ip = ip      # address on the testbed subnet
        self.port = port  # the switch-side veth of this host's link (None for the switch)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.ip})"

    def argv(self, cmd: str | Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *_as_argv(cmd)]

    def run(self, cmd: str | Sequence[str], *, check: bool = True, timeout: float = 60,
            capture: bool = True, text: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """Runs cmd in this namespace and waits (killing its process group on timeout)."""
        proc = self.popen(cmd, text=text,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None,
                          stdin=subprocess.PIPE if "input" in kwargs else subprocess.DEVNULL,
                          **{k: v for k, v in kwargs.items() if k != "input"})
        try:
            out, err = proc.communicate(kwargs.get("input"), timeout=timeout)
        except BaseException:
            self.kill(proc, signal.SIGKILL)
            raise
        finally:
            self.testbed._forget(proc)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise TestbedError(f"[{self.name}] {shlex.join(_as_argv(cmd))} exited "
                               f"{proc.returncode}: {err}")
        return result

    def popen(self, cmd: str | Sequence[str], **kwargs) -> subprocess.Popen:
        """Starts cmd in this namespace, in a new session (so kill() reaches its children).
        The testbed kills it at cleanup if it is still running."""
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.argv(cmd), **kwargs)  # `ip netns exec` execs: same pid
        self.testbed._track(proc)
        return proc

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGTERM,
             timeout: float = 10) -> int:
        """Sends sig to proc's process group and waits; SIGKILL if it outlives timeout."""
        for s in (sig, signal.SIGKILL):
            if proc.poll() is not None:
                break
            _signal(proc, s)
            try:
                proc.wait(timeout=timeout)
                break
            except subprocess.TimeoutExpired:
                continue
        self.testbed._forget(proc)
        return proc.wait()

    def python(self, code: str, *args: str, timeout: float = 60, check: bool = True,
               **kwargs) -> subprocess.CompletedProcess:
        """Runs Python code (this interpreter) in this namespace."""
        return self.run([sys.executable, "-c", code, *args], timeout=timeout, check=check,
                        **kwargs)

    def ping(self, ip: str, *, count: int = 1, timeout: float = 2) -> bool:
        """ICMP echo from this host to ip (raw socket; the machine has no ping binary)."""
        return self.python(_PING_CODE, ip, str(count), str(timeout), check=False,
                           timeout=timeout * count + 10).returncode == 0


# An ICMP echo client: exit 0 if every one of `count` echoes is answered within `timeout`.
_PING_CODE = r"""
import os, socket, struct, sys, time
dst, count, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack(f"!{len(b)//2}H", b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
ident = os.getpid() & 0xFFFF
for seq in range(count):
    body = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"stoker-testbed"
    s.sendto(body[:2] + struct.pack("!H", csum(body)) + body[4:], (dst, 0))
    deadline = time.monotonic() + timeout
    while True:
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            pkt, addr = s.recvfrom(2048)
        except socket.timeout:
            sys.exit(1)
        icmp = pkt[(pkt[0] & 15) * 4:]
        if addr[0] == dst and icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (ident, seq):
            break
"""


@dataclass
class Relay:
    """A running stoker_delay_relay; connect to `ip:port` to reach the target through it."""
    host: Host
    ip: str
    port: int
    proc: subprocess.Popen
    log: Path  # its stderr: one line per closed connection with byte counts

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def stop(self) -> None:
        self.host.kill(self.proc)

    def wait_for_log(self, text: str, timeout: float = 10) -> str:
        """Waits until the log holds text (a connection's line appears once both of its
        directions have ended, a moment after the peers see the end). Returns the log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log.read_text()
            if text in log or time.monotonic() > deadline:
                return log
            time.sleep(0.01)


class Testbed:
    """Hosts in network namespaces around one switch. Use as a context manager:

        with Testbed("stk-demo", ["storage", "node1", "node2"], rate="1gbit") as tb:
            srv = tb["storage"].popen([...server..., "--listen", f"{tb['storage'].ip}:7070"])
            tb["node1"].run([...client...])

    hosts: the names (lowercase letters, digits, single hyphens), or a count (h1 .. hN).
    rate/burst/shaper: shape every host link (see shape()); None leaves links unshaped.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, prefix: str = "stoker-tb", hosts: int | Sequence[str] = 3, *,
                 rate: str | None = None, burst: str = "512kb", shaper: str = "tbf",
                 workdir: str | os.PathLike | None = None, lock_timeout: float = 60):
        if not _NAME_RE.match(prefix):
            raise ValueError(f"prefix {prefix!r}: lowercase letters, digits, single hyphens")
        names = [f"h{i}" for i in range(1, hosts + 1)] if isinstance(hosts, int) else list(hosts)
        if not names or len(names) > 250 or len(set(names)) != len(names):
            raise ValueError("want 1..250 distinct host names")
        for n in names:
            if not _NAME_RE.match(n) or n == "sw":
                raise ValueError(f"host name {n!r}: lowercase letters, digits, single hyphens; "
                                 "not 'sw'")
        self.prefix = prefix
        self.names = names
        self.rate, self.burst, self.shaper = rate, burst, shaper
        self._own_workdir = workdir is None  # a default one is removed at cleanup
        self.workdir = Path(workdir) if workdir else Path(f"/tmp/{prefix}-work")
        self.subnet = 0
        self.hosts: list[Host] = []
        self.switch: Host | None = None
        self._procs: list[subprocess.Popen] = []
        self._namespaces: list[str] = []
        self._up = False
        self._old_sigterm = None
        self._lock_timeout = lock_timeout
        self._lock_fd: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "Testbed":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def _lock(self) -> None:
        lock_dir = Path("/tmp/stoker-testbed-locks")
        lock_dir.mkdir(exist_ok=True)
        fd = os.open(lock_dir / f"{self.prefix}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + self._lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TestbedError(f"prefix {self.prefix!r} is in use by another live "
                                       "testbed (lock in /tmp/stoker-testbed-locks)") from None
                time.sleep(0.1)
        self._lock_fd = fd

    def start(self) -> "Testbed":
        self._lock()
        try:
            remove_stale(self.prefix)  # we hold the lock: anything with our prefix is stale
            self.subnet = choose_subnet(self.prefix)
        except BaseException:
            self._unlock()
            raise
        atexit.register(self.cleanup)
        self._catch_sigterm()
        self._up = True
        try:
            self._build()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _catch_sigterm(self) -> None:
        # SIGTERM's default action would skip every cleanup; as SystemExit it unwinds the `with`.
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            def on_term(signum, frame):
                raise SystemExit(128 + signum)
            self._old_sigterm = signal.signal(signal.SIGTERM, on_term)

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # No IPv6 on the testbed: nothing here uses it, and DAD/router solicitations are noise.
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], capture_output=True)

    def _build(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        sw = f"{self.prefix}{_SEP}sw"
        self._add_namespace(sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "addr", "add", f"10.{self.subnet}.0.254/24", "dev", "br0")
        _ip("-n", sw, "link", "set", "br0", "up")
        self.switch = Host(self, "sw", sw, f"10.{self.subnet}.0.254", None)
        for k, name in enumerate(self.names, start=1):
            ns = f"{self.prefix}{_SEP}{name}"
            self._add_namespace(ns)
            port = f"p{k}"
            # Created inside the switch namespace with the peer placed straight into the host's:
            # no interface ever exists in the machine's own namespace.
            _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", sw, "link", "set", port, "master", "br0")
            _ip("-n", sw, "link", "set", port, "up")
            ip = f"10.{self.subnet}.0.{k}"
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            host = Host(self, name, ns, ip, port)
            self.hosts.append(host)
            if self.rate:
                self.shape(host, self.rate, burst=self.burst, shaper=self.shaper)

    def cleanup(self) -> None:
        """Kills every process in the testbed's namespaces and deletes them. Idempotent."""
        if not self._up:
            return
        self._up = False
        for proc in list(self._procs):
            if proc.poll() is None:
                _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + 2
        for proc in list(self._procs):
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
        self._procs.clear()
        for ns in reversed(self._namespaces):
            _destroy_namespace(ns)
        remove_stale(self.prefix)  # anything half-made by an interrupted _build()
        self._namespaces.clear()
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.cleanup)
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # -- hosts and processes ---------------------------------------------------------------

    def __getitem__(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def __iter__(self):
        return iter(self.hosts)

    def _track(self, proc: subprocess.Popen) -> None:
        self._procs.append(proc)

    def _forget(self, proc: subprocess.Popen) -> None:
        if proc in self._procs and proc.poll() is not None:
            self._procs.remove(proc)

    # -- links -----------------------------------------------------------------------------

    def shape(self, host: Host, rate: str, *, burst: str = "512kb", shaper: str = "tbf",
              latency: str = "20ms") -> None:
        """Caps both directions of host's link at rate (tc units: "1gbit", "200mbit").

        tbf: `tbf rate R burst B latency L` (burst must exceed one GSO packet, 64 KiB; 512kb
        gives ~96 % of the rate at 1 gbit). htb: one class with rate = ceil = R, burst B.
        Replaces any shaping already there."""
        for ns, dev in ((host.ns, "eth0"), (self.switch.ns, host.port)):
            if shaper == "tbf":
                _tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                    "burst", burst, "latency", latency)
            elif shaper == "htb":
                _tc(ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
                    "default", "1")
                _tc(ns, "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1",
                    "htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst)
            else:
                raise ValueError(f"shaper {shaper!r}: tbf or htb")

    def unshape(self, host: Host) -> None:
        for ns, dev in ((host.ns, "eth0"), (self.switch.ns, host.port)):
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)

    def links(self) -> str:
        """`ip -br link` of every namespace, for debugging."""
        out = []
        for ns in self._namespaces:
            out.append(f"# {ns}\n" + _ip("-n", ns, "-br", "link").stdout)
        return "".join(out)

    # -- latency ---------------------------------------------------------------------------

    def relay(self, to: Host, to_port: int, *, delay_ms: float = 0,
              up_delay_ms: float | None = None, down_delay_ms: float | None = None,
              rate_mbit: float | None = None, buffer: int | None = None,
              drop_after: int | None = None, corrupt_at: int | None = None,
              fault_direction: str = "down", fault_connections: int = 0,
              on: Host | None = None, listen_port: int = 0, binary: str | None = None) -> Relay:
        """Starts a delaying relay in `on` (default: the switch) that forwards to to:to_port.

        Connect to the returned Relay's address instead of the target's. delay_ms is added to
        each direction (so a round trip gains 2 × delay_ms); up (client → target) and down can
        differ. drop_after / corrupt_at: cut the stream after N bytes, or flip the byte at
        offset N, in fault_direction ("down" = target → client), on the first
        fault_connections connections (0: all). See src/testing/delay_relay.cc."""
        exe = binary or find_relay()
        if exe is None:
            raise TestbedError("stoker_delay_relay not found: build it (STOKER_TESTS=ON, target "
                               "stoker_delay_relay) or set STOKER_DELAY_RELAY")
        on = on or self.switch
        argv = [exe, "--listen", f"{on.ip}:{listen_port}", "--target", f"{to.ip}:{to_port}"]
        if up_delay_ms is None:
            up_delay_ms = delay_ms
        if down_delay_ms is None:
            down_delay_ms = delay_ms
        argv += ["--up-delay-ms", str(up_delay_ms), "--down-delay-ms", str(down_delay_ms)]
        for flag, value in (("--rate-mbit", rate_mbit), ("--buffer", buffer),
                            ("--drop-after", drop_after), ("--corrupt-at", corrupt_at)):
            if value is not None:
                argv += [flag, str(value)]
        argv += ["--fault-direction", fault_direction,
                 "--fault-connections", str(fault_connections)]
        log = self.workdir / f"relay-{len(self._procs)}-{time.monotonic_ns()}.log"
        with open(log, "wb") as err:
            proc = on.popen(argv, stdout=subprocess.PIPE, stderr=err)
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline().decode() if ready else ""
        m = re.match(r"listening on (\S+):(\d+)", line)
        if not m:
            on.kill(proc, signal.SIGKILL)
            raise TestbedError(f"relay did not start: {line!r} {log.read_text()!r}")
        return Relay(on, m.group(1), int(m.group(2)), proc, log)


def wait_for_port(host: Host, ip: str, port: int, timeout: float = 10) -> None:
    """Waits until something accepts TCP connections at ip:port, as seen from host."""
    code = ("import socket,sys,time\n"
            "end=time.monotonic()+float(sys.argv[3])\n"
            "while True:\n"
            "  try: socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=1).close(); break\n"
            "  except OSError:\n"
            "    if time.monotonic()>end: sys.exit(1)\n"
            "    time.sleep(0.02)\n")
    if host.python(code, ip, str(port), str(timeout), check=False,
                   timeout=timeout + 10).returncode != 0:
        raise TestbedError(f"nothing listening at {ip}:{port} (seen from {host.name})")


# -- traffic helpers (shared by tests and benchmarks) -------------------------------------------

def pattern(nbytes: int, seed: int = 0) -> bytes:
    """The bytes transfer() sends: a 4 MiB block of seeded random bytes, repeated."""
    block = random.Random(seed).randbytes(1 << 22)
    reps = -(-nbytes // len(block))
    return (block * reps)[:nbytes] if reps > 1 else block[:nbytes]


# Receives one connection at argv[1]:argv[2] until EOF; prints "ready" once listening, then a
# JSON summary. argv[3]: file to save the bytes to ("" for none); argv[4]: "1" to hash them.
_SINK_CODE = r"""
import hashlib, json, socket, sys, time
ip, port, save, verify = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((ip, port)); ls.listen(1)
print("ready", flush=True)
c, _ = ls.accept()
buf = bytearray(1 << 22); mv = memoryview(buf); h = hashlib.sha256(); n = 0; first = None
out = open(save, "wb") if save else None
error = None
try:
    while True:
        k = c.recv_into(mv)
        if k == 0:
            break
        if first is None:
            first = time.monotonic()
        n += k
        if verify: h.update(mv[:k])
        if out: out.write(mv[:k])
except OSError as e:
    error = repr(e)
end = time.monotonic()
if out: out.close()
print(json.dumps({"bytes": n, "sha256": h.hexdigest(), "seconds": end - (first or end),
                  "error": error}), flush=True)
"""

# Connects to argv[1]:argv[2] and sends argv[3] bytes of pattern(seed=argv[4]), then closes.
_SOURCE_CODE = r"""
import random, socket, sys, time
ip, port, nbytes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
block = memoryview(random.Random(seed).randbytes(1 << 22))
s = socket.create_connection((ip, port))
sent = 0
try:
    while sent < nbytes:
        k = min(len(block), nbytes - sent)
        s.sendall(block[:k]); sent += k
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
except OSError as e:
    print(f"sent {sent}: {e!r}", file=sys.stderr)
    sys.exit(3)
"""


def transfer(src: Host, dst: Host, nbytes: int, *, port: int = 5201, via: str | None = None,
             seed: int = 0, verify: bool = True, save: str | None = None,
             timeout: float = 120) -> dict:
    """Sends nbytes of pattern(nbytes, seed) over one TCP connection from src to a sink on dst
    (at dst.ip:port, or through `via` = "ip:port", e.g. a Relay's address).

    Returns the sink's view: {"bytes", "sha256" (of what arrived, if verify), "seconds" (first
    byte to EOF), "error" (on a reset), "sender_rc"}; "gbit_s" when anything arrived."""
    sink = dst.popen([sys.executable, "-c", _SINK_CODE, dst.ip, str(port), save or "",
                      "1" if verify else "0"], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([sink.stdout], [], [], 10)
        if not ready or sink.stdout.readline().strip() != "ready":
            raise TestbedError(f"sink on {dst.name} did not start")
        ip, p = via.rsplit(":", 1) if via else (dst.ip, str(port))
        sender = src.run([sys.executable, "-c", _SOURCE_CODE, ip, p, str(nbytes), str(seed)],
                         check=False, timeout=timeout)
        out, _ = sink.communicate(timeout=timeout)
    finally:
        dst.kill(sink, signal.SIGKILL)
    result = json.loads(out.strip().splitlines()[-1])
    result["sender_rc"] = sender.returncode
    if result["seconds"] > 0:
        result["gbit_s"] = result["bytes"] * 8 / result["seconds"] / 1e9
    return result


# An echo server at argv[1]:argv[2], one thread per connection; prints "ready".
_ECHO_CODE = r"""
import socket, sys, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2]))); ls.listen(16)
print("ready", flush=True)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (b := c.recv(65536)):
        c.sendall(b)
    c.close()
while True:
    threading.Thread(target=serve, args=(ls.accept()[0],), daemon=True).start()
"""

# argv[3] round trips of one byte to argv[1]:argv[2]; prints each one's seconds as JSON.
_RTT_CODE = r"""
import json, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for i in range(int(sys.argv[3])):
    t = time.monotonic(); s.sendall(b"x")
    if s.recv(1) != b"x": sys.exit(4)
    rtts.append(time.monotonic() - t)
print(json.dumps(rtts))
"""


def start_echo(host: Host, port: int = 5300) -> subprocess.Popen:
    """An echo server on host.ip:port (killed at cleanup, or with host.kill)."""
    proc = host.popen([sys.executable, "-c", _ECHO_CODE, host.ip, str(port)],
                      stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    if not ready or proc.stdout.readline().strip() != "ready":
        raise TestbedError(f"echo server on {host.name} did not start")
    return proc


def round_trips(host: Host, address: str, count: int = 20) -> list[float]:
    """Seconds for each of `count` one-byte round trips from host to an echo at address."""
    ip, port = address.rsplit(":", 1)
    out = host.python(_RTT_CODE, ip, port, str(count)).stdout
    return json.loads(out)


def _bench(argv: list[str]) -> None:
    """python3 tests/netns/testbed.py [GBYTES]: throughput of a plain link, a tbf 1 gbit link,
    and the delay relay at 0 / 1 / 10 ms (one TCP stream each), plus relay round trips."""
    gbytes = float(argv[0]) if argv else 2.0
    n = int(gbytes * 1e9)
    with Testbed("stoker-tb-bench", ["a", "b"]) as tb:
        a, b = tb["a"], tb["b"]
        start_echo(b, 5300)
        print(f"plain veth+bridge      {transfer(a, b, n, verify=False)['gbit_s']:6.2f} Gbit/s")
        for delay in (0, 1, 10):
            r = tb.relay(b, 5201, delay_ms=delay)
            g = transfer(a, b, n, via=r.address, verify=False)["gbit_s"]
            e = tb.relay(b, 5300, delay_ms=delay)
            rtt = min(round_trips(a, e.address, 50)) * 1e3
            print(f"relay {delay:4.1f} ms/direction {g:6.2f} Gbit/s   min RTT {rtt:.3f} ms")
            r.stop()
            e.stop()
        tb.shape(a, "1gbit")
        tb.shape(b, "1gbit")
        m = max(n // 4, 1)
        print(f"tbf 1gbit both links   {transfer(a, b, m, verify=False)['gbit_s']:6.2f} Gbit/s")
        r = tb.relay(b, 5201, delay_ms=1)
        g = transfer(a, b, m, via=r.address, verify=False)["gbit_s"]
        print(f"tbf 1gbit + relay 1 ms {g:6.2f} Gbit/s")


def netns_unavailable() -> str | None:
    """Why network-namespace testbeds cannot run here (no root, no usable `ip netns`), or None."""
    if os.geteuid() != 0:
        return "network-namespace tests need root (ip netns add)"
    probe = f"stoker-probe-{os.getpid()}"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`ip netns` is not usable here: {e}"
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


if __name__ == "__main__":
    _bench(sys.argv[1:])
