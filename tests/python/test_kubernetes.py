"""The Kubernetes manifests of deploy/kubernetes/ (docs/kubernetes.md, issue 18), offline:

- every manifest passes `kubernetes-validate --strict` against a pinned Kubernetes version
  (and a misspelled field fails it: the check can fail);
- what stoker needs of them holds: secrets mounted 0400, memory requests that cover
  --memory-limit, probes on the metrics port, STOKER_PARTS equal to the pack Job's completions,
  the cache daemons' --peers equal to the training pods' names, the trainers' STOKER_FEEDERS
  equal to the feeder pods' names and port;
- the commands in them run: each container's stoker arguments (with the Job controller's
  $(JOB_COMPLETION_INDEX) filled in and cluster paths mapped to local ones) are run by this
  build: serve starts and answers, pack writes its part, commit publishes, node starts, feed
  starts, answers its metrics and logs its counters at SIGTERM;
- a secret mounted with Kubernetes' default mode (0644) is refused, saying how to mount it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import STOKER, free_port, make_tree

KUBERNETES_VERSION = "1.33.0"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
VALIDATE = shutil.which("kubernetes-validate",
                        path=os.pathsep.join([str(Path(sys.executable).parent),
                                              os.environ.get("PATH", "")]))

pytestmark = pytest.mark.skipif(STOKER is None, reason="stoker CLI not installed")


def resources() -> dict[str, dict]:
    """'Kind/name' -> the resource, over every manifest."""
    out = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def pod_spec(resource: dict) -> dict:
    return resource["spec"]["template"]["spec"]


def containers(resource: dict) -> list[dict]:
    spec = pod_spec(resource)
    return spec.get("initContainers", []) + spec["containers"]


def flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
        if a == f"--{name}":
            return args[i + 1]
    return None


def quantity(text: str) -> int:
    """A Kubernetes memory quantity ('3Gi') or a stoker size ('2GiB') in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|KiB|MiB|GiB|TiB)?", text)
    assert m, text
    return int(m[1]) * {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[
        m[2].removesuffix("B") if m[2] else None]


def test_manifests_pass_kubernetes_validate(tmp_path):
    if VALIDATE is None:
        pytest.fail("kubernetes-validate is not installed (scripts/setup installs it)")
    assert len(MANIFESTS) >= 5, MANIFESTS
    r = subprocess.run([VALIDATE, "--strict", "-k", KUBERNETES_VERSION, *map(str, MANIFESTS)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # The same check fails a field Kubernetes does not know.
    bad = tmp_path / "bad.yaml"
    bad.write_text((DEPLOY / "serve.yaml").read_text().replace("readinessProbe:",
                                                                "readynessProbe:"))
    r = subprocess.run([VALIDATE, "--strict", "-k", KUBERNETES_VERSION, str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "readynessProbe" in r.stdout + r.stderr, r.stdout + r.stderr


def test_manifests_give_stoker_what_it_needs():
    res = resources()
    version = subprocess.run([STOKER, "--version"], capture_output=True, text=True).stdout.split()[-1]
    workloads = [r for r in res.values() if r["kind"] in ("StatefulSet", "Job")]
    assert {f"{r['kind']}/{r['metadata']['name']}" for r in workloads} == {
        "StatefulSet/stoker-serve", "StatefulSet/feeders", "Job/stoker-pack", "Job/stoker-commit",
        "Job/train"}
    for workload in workloads:
        for volume in pod_spec(workload)["volumes"]:
            if "secret" in volume:  # owner-only: stoker refuses anything wider
                assert volume["secret"]["defaultMode"] == 0o400, workload["metadata"]["name"]
        assert "fsGroup" not in pod_spec(workload).get("securityContext", {})
        for c in containers(workload):
            if c["image"].startswith("localhost/stoker:"):
                assert c["image"] == f"localhost/stoker:{version}", c["image"]
            args = c.get("args", [])
            limit = flag(args, "memory-limit")
            if limit:  # the request covers the limit, with 1Gi for the process
                memory = c["resources"]["requests"]["memory"]
                assert memory == c["resources"]["limits"]["memory"]
                assert quantity(memory) >= quantity(limit) + 2**30, (c["name"], memory, limit)
            metrics = flag(args, "metrics-port")
            if metrics:
                port = {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]
                assert port == int(metrics)
                probes = [c[k] for k in ("readinessProbe", "livenessProbe", "startupProbe")
                          if k in c]
                assert probes and all(p["httpGet"] == {"path": "/metrics", "port": "metrics"}
                                      for p in probes), c["name"]
    pack = res["Job/stoker-pack"]
    env = {e["name"]: e["value"] for e in containers(pack)[0]["env"]}
    assert pack["spec"]["completionMode"] == "Indexed"
    assert int(env["STOKER_PARTS"]) == pack["spec"]["completions"] == pack["spec"]["parallelism"]
    commit_args = containers(res["Job/stoker-commit"])[0]["args"]
    assert flag(commit_args, "job") in containers(pack)[0]["args"][0]
    train = res["Job/train"]
    node = next(c for c in containers(train) if c["name"] == "stoker-node")
    assert node["restartPolicy"] == "Always"  # a native sidecar
    n, sub = train["spec"]["completions"], pod_spec(train)["subdomain"]
    assert res[f"Service/{sub}"]["spec"]["clusterIP"] == "None"
    # The job cache's members: every training pod's sidecar, then every feeder pod.
    feeders = res["StatefulSet/feeders"]
    service = res[f"Service/{feeders['spec']['serviceName']}"]
    feed = containers(feeders)[0]
    members = [f"train-{i}.{sub}:7171" for i in range(n)] + [
        f"feeders-{i}.{service['metadata']['name']}:7171"
        for i in range(feeders["spec"]["replicas"])]
    assert flag(node["args"], "peers") == ",".join(members)
    assert flag(feed["args"], "peers") == ",".join(members)
    assert flag(feed["args"], "cache-listen") == "0.0.0.0:7171"
    assert flag(feed["args"], "store") == flag(node["args"], "store")
    assert flag(feed["args"], "advertise") == f"$(POD_NAME).{service['metadata']['name']}:7072"
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in feed["env"]} == \
        {"POD_NAME": "metadata.name"}
    assert any(m["mountPath"] == "/tmp" for m in feed["volumeMounts"])  # the cache's socket
    memory = feed["resources"]["requests"]["memory"]
    assert quantity(memory) >= quantity(flag(feed["args"], "memory-limit")) + quantity(
        flag(feed["args"], "cache-memory-limit")) + 2**30, memory
    trainer = next(c for c in containers(train) if c["name"] == "trainer")
    trainer_env = {e["name"]: e["value"] for e in trainer["env"]}
    assert trainer_env["STOKER_NODE"] == flag(node["args"], "socket")
    assert f"--nnodes={n}" in trainer["args"]
    # The training script is the example's, as it is (the Slurm test runs that file).
    script = res["ConfigMap/train-script"]["data"]["train_one_epoch.py"]
    assert script == (DEPLOY.parents[1] / "examples" / "python" / "train_one_epoch.py").read_text()
    assert "/scripts/train_one_epoch.py" in trainer["args"]
    # The trainers name every feeder pod, by its stable DNS name (pod.service) at its port.
    assert service["spec"]["clusterIP"] == "None"
    port = int(flag(feed["args"], "listen").rsplit(":", 1)[1])
    assert {p["name"]: p["containerPort"] for p in feed["ports"]}["feed"] == port
    assert trainer_env["STOKER_FEEDERS"] == ",".join(
        f"feeders-{i}.{service['metadata']['name']}:{port}"
        for i in range(feeders["spec"]["replicas"]))
    # The feeders serve this training job: its dataset's URI is one they reach (the server's).
    assert trainer_env["DATASET"].startswith("stoker://stoker-serve:7070/")


def test_kustomization_lists_the_long_running_services():
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["namespace.yaml", "serve.yaml", "feeders.yaml"]


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in args]


def test_the_manifests_commands_run_here(tmp_path):
    """Each stoker command line of the manifests, run by this build with the cluster's paths and
    names mapped to local ones: a flag renamed or a value this version refuses fails here."""
    res = resources()
    secret = tmp_path / "etc" / "secret"
    secret.parent.mkdir()
    secret.write_text("kubernetes-walk-through-secret\n")
    secret.chmod(0o400)
    data = tmp_path / "data"
    data.mkdir()
    port, metrics = free_port(), free_port()

    def local(args: list[str]) -> list[str]:
        out = []
        for a in args:
            a = a.replace("/etc/stoker/secret", str(secret)).replace("=/data", f"={data}")
            a = a.replace("0.0.0.0:7070", f"127.0.0.1:{port}").replace("=9100", f"={metrics}")
            a = a.replace("stoker://stoker-serve:7070", f"stoker://127.0.0.1:{port}")
            out.append(a)
        return out

    serve = containers(res["StatefulSet/stoker-serve"])[0]
    server = subprocess.Popen([STOKER, *local(serve["args"])], stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert "serving" in line, line
        env = dict(os.environ, STOKER_SECRET_FILE=str(secret),
                   PATH=f"{Path(STOKER).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        # pack: each index of the Indexed Job writes its part, as its shell command says.
        pack = containers(res["Job/stoker-pack"])[0]
        parts = int({e["name"]: e["value"] for e in pack["env"]}["STOKER_PARTS"])
        raw = tmp_path / "raw"
        for k in range(parts):
            make_tree(raw / f"shard-{k}", seed=500 + k, classes=2, files_per_class=3,
                      max_size=4_000, prefix=f"s{k}-")
        script = local([pack["args"][0].replace("/raw/", f"{raw}/")])[0]
        for k in range(parts):
            r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120,
                               env=dict(env, JOB_COMPLETION_INDEX=str(k), STOKER_PARTS=str(parts)))
            assert r.returncode == 0, r.stderr
        commit = containers(res["Job/stoker-commit"])[0]
        r = subprocess.run([STOKER, *local(commit["args"])], capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        info = json.loads(subprocess.run(
            [STOKER, "info", "--json", str(data / "photos.stoker")], capture_output=True,
            text=True, check=True).stdout)
        assert info["version"] == 1 and info["files"] == parts * 6, info
        # node: the sidecar's command line, as pod 0 of a one-pod job.
        node = next(c for c in containers(res["Job/train"]) if c["name"] == "stoker-node")
        node_port, node_metrics = free_port(), free_port()
        args = expand(local(node["args"]), {"JOB_COMPLETION_INDEX": "0"})
        args = [a.replace("0.0.0.0:7171", f"127.0.0.1:{node_port}")
                 .replace("train-0.train:7171", f"127.0.0.1:{node_port}")
                 .replace(",train-1.train:7171", "")
                 .replace("/run/stoker/", f"{tmp_path}/")
                 .replace("=9101", f"={node_metrics}") for a in args]
        daemon = subprocess.Popen([STOKER, *args], stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "node.sock").exists():
                assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read()
                time.sleep(0.1)
            with socket.create_connection(("127.0.0.1", node_metrics), timeout=10) as s:
                s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.")
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
        check_feeder_runs(containers(res["StatefulSet/feeders"])[0]["args"], secret, env,
                          f"127.0.0.1:{port}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def check_feeder_runs(args: list[str], secret: Path, env: dict[str, str], server: str) -> None:
    """The feeder's command line, on loopback, as the only member of the job cache: it joins
    the cache, listens where it says, answers GET /metrics with its counters and the cache's,
    and at SIGTERM exits 0 and logs them."""
    feed_port, feed_metrics, cache_port = free_port(), free_port(), free_port()
    args = [a.replace("/etc/stoker/secret", str(secret))
             .replace("0.0.0.0:7072", f"127.0.0.1:{feed_port}")
             .replace("0.0.0.0:7171", f"127.0.0.1:{cache_port}")
             .replace("stoker://stoker-serve:7070", f"stoker://{server}")
             .replace("$(POD_NAME).feeders:7072", f"127.0.0.1:{feed_port}")
             .replace("=9102", f"={feed_metrics}") for a in args]
    args = [f"--peers=127.0.0.1:{cache_port}" if a.startswith("--peers=") else a for a in args]
    assert f"--listen=127.0.0.1:{feed_port}" in args and f"--metrics-port={feed_metrics}" in args
    feeder = subprocess.Popen([STOKER, *args], stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [feeder.stderr.readline() for _ in range(2)]
        assert "job cache: 1 daemon(s)" in lines[0], lines
        assert f"feeding on 127.0.0.1:{feed_port}" in lines[1], lines
        with socket.create_connection(("127.0.0.1", feed_metrics), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.") and b"stoker_feed_slices_total" in answer, answer
        assert b"stoker_node_store_fills_total 0" in answer, answer
        socket.create_connection(("127.0.0.1", feed_port), timeout=10).close()
    finally:
        feeder.send_signal(signal.SIGTERM)
        rest = feeder.communicate(timeout=30)[1]
    assert feeder.returncode == 0 and "stopped: 0 slice(s)" in rest, (feeder.returncode, rest)
    assert "job cache: 0 chunk(s) read" in rest, rest


def test_a_secret_mounted_with_the_default_mode_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("kubernetes-walk-through-secret\n")
    secret.chmod(0o644)  # a Secret volume without defaultMode
    r = subprocess.run([STOKER, "serve", "--listen", "127.0.0.1:0", "--root", str(tmp_path),
                        "--secret-file", str(secret)], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "mode 0644" in r.stderr and "defaultMode: 0400" in r.stderr, \
        r.stderr
