"""A real S3 server (Ceph's RADOS Gateway on 127.0.0.1) for tests and benchmarks.

A thin wrapper around scripts/s3-server, which starts one Ceph monitor, one in-memory OSD and
radosgw in a private directory (about 2 s from zero; see the script's docstring):

    import rgw
    reason = rgw.available()          # None, or why it cannot run here (packages missing, ...)
    s3 = rgw.start()                  # {"endpoint", "access_key", "secret_key", "region",
                                      #  "dir", "env"}; cached: later calls return the same one
    client = rgw.boto3_client(s3)     # path-style, us-east-1 (imports boto3 only here)
    ...
    rgw.stop()                        # also runs at interpreter exit

start(dir=None) uses $STOKER_S3_DIR when set, else a private directory for this process
(/tmp/stoker-s3-<pid>), so a test run neither reuses nor kills a server someone started by hand.
A server that already runs in the chosen directory is reused and then left running: stop()
and the exit hook only stop servers this process started.

Stdlib only (boto3 is imported by boto3_client alone).
"""
from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "s3-server"
REQUIRED_EXES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool",
                 "ceph-authtool", "ceph")
INSTALL_HINT = "apt-get install ceph-mon ceph-osd radosgw ceph-common"

_servers: dict[str, dict] = {}      # resolved dir -> server info
_owned: set[str] = set()            # dirs whose server this process started
_pid = os.getpid()                  # a forked child must not stop its parent's servers


class RgwError(RuntimeError):
    pass


def available() -> str | None:
    """None if the gateway can be started here, else the reason it cannot."""
    if not sys.platform.startswith("linux"):
        return "the RADOS Gateway test server needs Linux"
    if not SCRIPT.is_file():
        return f"{SCRIPT} is missing"
    missing = [exe for exe in REQUIRED_EXES if shutil.which(exe) is None]
    if missing:
        return f"Ceph RADOS Gateway not installed (no {', '.join(missing)}; {INSTALL_HINT})"
    return None


def _default_dir() -> Path:
    env = os.environ.get("STOKER_S3_DIR")
    return Path(env) if env else Path(f"/tmp/stoker-s3-{os.getpid()}")


def _script(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _parse(stdout: str, root: Path) -> dict:
    env: dict[str, str] = {}
    for line in stdout.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"]:
            env.update(w.split("=", 1) for w in words[1:] if "=" in w)
    try:
        return {"endpoint": env["AWS_ENDPOINT_URL"], "access_key": env["AWS_ACCESS_KEY_ID"],
                "secret_key": env["AWS_SECRET_ACCESS_KEY"], "region": env["AWS_REGION"],
                "dir": str(root), "env": env}
    except KeyError as e:
        raise RgwError(f"s3-server printed no {e.args[0]}: {stdout!r}") from None


def start(dir: str | os.PathLike | None = None, port: int | None = None,
          sts: bool = False) -> dict:
    """Starts (or reuses) the gateway in dir; returns its connection info (a fresh dict).
    sts: with the gateway's STS (scripts/s3-server --sts)."""
    reason = available()
    if reason:
        raise RgwError(reason)
    root = (Path(dir) if dir is not None else _default_dir()).resolve()
    key = str(root)
    if key in _servers:
        return dict(_servers[key], env=dict(_servers[key]["env"]))
    status = _script("status", "--dir", key, timeout=30)
    if status.returncode == 0:
        info = _parse(status.stdout, root)            # someone else's: reuse, never stop it
    else:
        args = ["start", "--dir", key] + (["--port", str(port)] if port else []) + \
            (["--sts"] if sts else [])
        proc = _script(*args)
        if proc.returncode != 0:
            raise RgwError(f"scripts/s3-server {' '.join(args)} failed (rc {proc.returncode}):\n"
                           f"{proc.stderr}{proc.stdout}")
        info = _parse(proc.stdout, root)
        _owned.add(key)
    _servers[key] = info
    return dict(info, env=dict(info["env"]))


def stop(dir: str | os.PathLike | None = None) -> None:
    """Stops the server(s) this process started (all of them, or the one in dir)."""
    if os.getpid() != _pid:
        return
    keys = [str(Path(dir).resolve())] if dir is not None else list(_servers)
    errors = []
    for key in keys:
        _servers.pop(key, None)
        if key in _owned:
            _owned.discard(key)
            proc = _script("stop", "--dir", key, timeout=60)
            if proc.returncode != 0:
                errors.append(f"{key}: {proc.stderr.strip()}")
    if errors:
        raise RgwError("s3-server stop failed: " + "; ".join(errors))


def boto3_client(info: dict | None = None, **config):
    """A boto3 S3 client for info (default: start()), path-style, in the server's region."""
    import boto3
    from botocore.config import Config

    info = info or start()
    cfg = {"s3": {"addressing_style": "path"}, "retries": {"max_attempts": 2}}
    cfg.update(config)
    return boto3.client("s3", endpoint_url=info["endpoint"], region_name=info["region"],
                        aws_access_key_id=info["access_key"],
                        aws_secret_access_key=info["secret_key"], config=Config(**cfg))


@atexit.register
def _stop_at_exit() -> None:
    try:
        stop()
    except Exception as e:  # noqa: BLE001 - at exit, report and go on
        print(f"rgw: {e}", file=sys.stderr)
