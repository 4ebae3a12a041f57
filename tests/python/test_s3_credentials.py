"""S3 credentials that are not keys in the environment (src/s3/credentials.h, docs/s3.md).

A training job on AWS gets temporary credentials — from a `credential_process`, the EC2
instance metadata service, the ECS/EKS container endpoint or a web identity token exchanged at
STS (EKS IRSA) — and outlives them. Here each source hands stoker real credentials of the Ceph
RADOS Gateway (access keys made and revoked with radosgw-admin, or temporary ones with a session
token from its STS GetSessionToken), and the tests check that stoker reads with them, fetches new
ones before they expire and when the store refuses them, and names a source that fails.

The metadata, container and STS endpoints are AWS's documented HTTP protocols, served on
loopback by this file (there is no AWS here); the store is real. No test reaches
169.254.169.254: conftest disables the default instance metadata probe, and the tests that
want it point AWS_EC2_METADATA_SERVICE_ENDPOINT at loopback.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import rgw
from conftest import STOKER, make_tree, s3_skip, temporary_bucket

pytestmark = [pytest.mark.s3, s3_skip,
              pytest.mark.skipif(STOKER is None, reason="stoker CLI not installed")]

ROLE = "stoker-test-role"
ROLE_ARN = "arn:aws:iam::123456789012:role/stoker-trainer"


def iso(seconds_from_now: float) -> str:
    t = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds_from_now)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gateway_keys(gateway) -> dict:
    return dict(endpoint_url=gateway["endpoint"], region_name=gateway["region"],
                aws_access_key_id=gateway["access_key"],
                aws_secret_access_key=gateway["secret_key"])


@pytest.fixture
def sts(gateway):
    """The gateway's STS (scripts/s3-server enables it). A user may get session tokens only
    where a user policy allows it, and putting that policy needs the user-policy capability
    (put again for each test: radosgw-admin's key changes drop a user's policies)."""
    import boto3
    radosgw_admin(gateway, "caps", "add", "--uid", "stoker", "--caps", "user-policy=*")
    boto3.client("iam", **gateway_keys(gateway)).put_user_policy(
        UserName="stoker", PolicyName="session-tokens", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": ["sts:GetSessionToken"], "Resource": "*"}]}))
    return boto3.client("sts", **gateway_keys(gateway))


def session_credentials(sts) -> dict:
    """Real temporary credentials (with a session token) from the gateway's STS."""
    c = sts.get_session_token(DurationSeconds=900)["Credentials"]
    return {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
            "Token": c["SessionToken"]}


def radosgw_admin(gateway, *args: str) -> str:
    r = subprocess.run(["radosgw-admin", "-c", str(Path(gateway["dir"]) / "ceph.conf"), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"radosgw-admin {' '.join(args)}: {r.stderr}"
    return r.stdout


def bare_env(gateway, tmp_path, **extra: str) -> dict[str, str]:
    """The store's endpoint and region, and no credentials at all: no keys, empty AWS files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=gateway["endpoint"], AWS_REGION=gateway["region"],
               AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_CONFIG_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true", HOME=str(tmp_path),
               AWS_METADATA_SERVICE_TIMEOUT="10")  # a loaded 2-core machine
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert r.returncode == 0, f"stoker {' '.join(args)}: {r.returncode}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway of this module's own, with its STS (scripts/s3-server --sts), which changes
    some of its error codes for everyone: the other S3 tests' gateway runs without."""
    root = tmp_path_factory.mktemp("sts-gateway")
    yield rgw.start(dir=root, sts=True)
    rgw.stop(dir=root)


@pytest.fixture(scope="module")
def dataset(gateway, tmp_path_factory):
    """A small dataset on the gateway, packed with the plain keys; its files' bytes."""
    gen = temporary_bucket(rgw.boto3_client(gateway), "creds")
    bucket = next(gen)
    src = tmp_path_factory.mktemp("credsrc") / "src"
    # Small chunks (a few files each): a reader that holds a chunk it has read makes no more
    # requests for it, so each step of the rotation test reads chunks it has not read before.
    files = make_tree(src, seed=5, classes=2, files_per_class=15, max_size=20_000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(gateway["env"], AWS_EC2_METADATA_DISABLED="true")
    uri = f"s3://{bucket}/ds"
    subprocess.run([STOKER, "pack", "-q", str(src), uri, "--chunk-size", "64KiB"], check=True,
                   env=env, timeout=120)
    yield uri, files
    next(gen, None)


class Endpoints:
    """IMDSv2, the container endpoint and STS AssumeRoleWithWebIdentity on 127.0.0.1, answering
    with `self.credentials()` (a dict: AccessKeyId, SecretAccessKey, Token) and an Expiration
    `self.lifetime` seconds away; every request is kept in `self.requests`."""

    def __init__(self, credentials):
        self.credentials = credentials
        self.lifetime = 3600.0
        self.container_token = "container-secret"
        self.web_tokens: set[str] = set()  # what the identity provider signed
        self.requests: list[tuple[str, str, dict]] = []
        self.tokens: set[str] = set()
        self.role = ROLE
        self.fail_next = 0  # answer this many requests 500 first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def answer(self, status: int, body: str, kind: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def record(self, body: str = "") -> None:
                outer.requests.append((self.command, self.path,
                                       {k.lower(): v for k, v in self.headers.items()}, body))

            def do_PUT(self):
                self.record()
                if self.path != "/latest/api/token":
                    return self.answer(404, "")
                if "X-aws-ec2-metadata-token-ttl-seconds" not in self.headers:
                    return self.answer(400, "missing TTL")
                token = f"imds-token-{len(outer.tokens)}"
                outer.tokens.add(token)
                self.answer(200, token)

            def do_GET(self):
                self.record()
                if outer.fail_next > 0:
                    outer.fail_next -= 1
                    return self.answer(500, "busy")
                creds = dict(outer.credentials(), Expiration=iso(outer.lifetime))
                base = "/latest/meta-data/iam/security-credentials/"
                if self.path.startswith(base):
                    if self.headers.get("X-aws-ec2-metadata-token") not in outer.tokens:
                        return self.answer(401, "")
                    if self.path == base:
                        return self.answer(200 if outer.role else 404, outer.role or "")
                    if self.path == base + outer.role:
                        return self.answer(200, json.dumps(dict(creds, Code="Success",
                                                                Type="AWS-HMAC")),
                                           "application/json")
                    return self.answer(404, "")
                if self.path == "/container-credentials":
                    if self.headers.get("Authorization") != outer.container_token:
                        return self.answer(401, '{"message": "wrong token"}')
                    return self.answer(200, json.dumps(creds), "application/json")
                self.answer(404, "")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                self.record(body)
                form = dict(urllib.parse.parse_qsl(body))
                if form.get("Action") != "AssumeRoleWithWebIdentity" or \
                        form.get("WebIdentityToken") not in outer.web_tokens or \
                        form.get("RoleArn") != ROLE_ARN:
                    return self.answer(403, "<ErrorResponse><Error><Code>AccessDenied</Code>"
                                            "</Error></ErrorResponse>", "text/xml")
                c = outer.credentials()
                self.answer(200, (
                    "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                    f"<Credentials><AccessKeyId>{c['AccessKeyId']}</AccessKeyId>"
                    f"<SecretAccessKey>{c['SecretAccessKey']}</SecretAccessKey>"
                    f"<SessionToken>{c['Token']}</SessionToken>"
                    f"<Expiration>{iso(outer.lifetime)}</Expiration></Credentials>"
                    "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"),
                    "text/xml")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self, method: str) -> list[str]:
        return [p for m, p, _, _ in self.requests if m == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints(sts):
    e = Endpoints(lambda: session_credentials(sts))
    yield e
    e.close()


def test_instance_metadata_v2(gateway, dataset, endpoints, tmp_path):
    uri, files = dataset
    env = bare_env(gateway, tmp_path, AWS_EC2_METADATA_DISABLED=None,
                   AWS_EC2_METADATA_SERVICE_ENDPOINT=endpoints.url)
    r = run(env, "verify", uri)
    assert "OK" in r.stdout
    # IMDSv2: a session token first, then the role, then its credentials, both with the token.
    puts = [(m, p, h) for m, p, h, _ in endpoints.requests]
    assert puts[0][:2] == ("PUT", "/latest/api/token")
    assert "x-aws-ec2-metadata-token-ttl-seconds" in puts[0][2]
    assert [p for m, p, h in puts[1:3]] == ["/latest/meta-data/iam/security-credentials/",
                                           f"/latest/meta-data/iam/security-credentials/{ROLE}"]
    assert all(h.get("x-aws-ec2-metadata-token") in endpoints.tokens for _, _, h in puts[1:3])
    path = sorted(files)[0]
    cat = subprocess.run([STOKER, "cat", uri, path], capture_output=True, env=env, timeout=60)
    assert cat.returncode == 0 and cat.stdout == files[path]

    # An instance without a role: the error says so, and names the service.
    endpoints.role = ""
    r = run(env, "ls", uri, check=False)
    assert r.returncode != 0
    assert "no S3 credentials" in r.stderr and "instance metadata" in r.stderr \
        and "the instance has no IAM role" in r.stderr, r.stderr


def test_container_endpoint_with_a_rotated_token_file(gateway, dataset, endpoints, tmp_path):
    uri, files = dataset
    token_file = tmp_path / "token"
    token_file.write_text(endpoints.container_token + "\n")
    env = bare_env(gateway, tmp_path,
                   AWS_CONTAINER_CREDENTIALS_FULL_URI=endpoints.url + "/container-credentials",
                   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=str(token_file))
    endpoints.fail_next = 1  # a server error is tried again (a second later)
    run(env, "verify", uri)
    assert endpoints.paths("GET") == ["/container-credentials"] * 2
    assert endpoints.requests[0][2]["authorization"] == endpoints.container_token
    token_file.write_text("stale")
    r = run(env, "verify", uri, check=False)
    assert r.returncode != 0 and "container credentials endpoint" in r.stderr \
        and "HTTP 401" in r.stderr, r.stderr
    assert len(endpoints.paths("GET")) == 3  # a refusal is not tried again


def test_web_identity_refreshed_with_the_rotated_token(gateway, dataset, endpoints, tmp_path,
                                                      monkeypatch):
    """EKS IRSA: the token file is exchanged at STS; credentials that run out are fetched again
    with the token file as it is then (Kubernetes rotates it)."""
    import stoker
    uri, files = dataset
    token_file = tmp_path / "web-identity-token"
    token_file.write_text("eyJ.first-token.sig")
    endpoints.web_tokens = {"eyJ.first-token.sig", "eyJ.second-token.sig"}
    endpoints.lifetime = 8.0  # refreshed at half their life: 4 s
    env = bare_env(gateway, tmp_path, AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file),
                   AWS_ROLE_ARN=ROLE_ARN, AWS_ENDPOINT_URL_STS=endpoints.url)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        if k.startswith("AWS_") or k == "HOME":
            monkeypatch.setenv(k, v)
    ds = stoker.Dataset(uri)
    first = sorted(files)
    assert ds.read(first[0]) == files[first[0]]
    assert len(endpoints.paths("POST")) == 1
    form = dict(urllib.parse.parse_qsl(endpoints.requests[0][3]))
    assert form["RoleArn"] == ROLE_ARN and form["RoleSessionName"].startswith("stoker-")
    token_file.write_text("eyJ.second-token.sig")
    time.sleep(4.5)
    endpoints.lifetime = 3600.0  # the next ones last: one refresh in this test, not a race
    for path in first:
        assert ds.read(path) == files[path]
    posts = [dict(urllib.parse.parse_qsl(b)) for m, _, _, b in endpoints.requests if m == "POST"]
    assert len(posts) == 2, posts
    assert posts[1]["WebIdentityToken"] == "eyJ.second-token.sig"

    # A token STS refuses: the error names the exchange and the role.
    token_file.write_text("forged")
    r = run(env, "ls", uri, check=False)
    assert r.returncode != 0 and "AssumeRoleWithWebIdentity" in r.stderr \
        and ROLE_ARN in r.stderr and "HTTP 403" in r.stderr, r.stderr


def key_client(gateway, access: str, secret: str):
    import boto3
    return boto3.client("s3", **dict(gateway_keys(gateway), aws_access_key_id=access,
                                     aws_secret_access_key=secret))


def wait_until_refused(client, access: str) -> None:
    """Until the gateway (which caches users) refuses a revoked key."""
    import botocore.exceptions
    deadline = time.monotonic() + 30
    while True:
        try:
            client.list_buckets()
        except botocore.exceptions.ClientError:
            return
        assert time.monotonic() < deadline, f"the gateway still takes the revoked key {access}"
        time.sleep(0.2)


def write_process_config(tmp_path: Path, profile: str, creds_file: Path) -> Path:
    """A profile whose credential_process prints `creds_file` and counts its calls."""
    script = tmp_path / "creds.sh"
    script.write_text(f"#!/bin/sh\necho call >> {tmp_path / 'calls'}\ncat {creds_file}\n")
    script.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[profile {profile}]\ncredential_process = {script}\n"
                      f"[profile broken]\ncredential_process = sh -c 'echo SSO session expired, "
                      f"run aws sso login >&2; exit 2'\n")
    return config


def calls(tmp_path: Path) -> int:
    p = tmp_path / "calls"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_credential_process_keys_rotated_and_revoked(gateway, dataset, tmp_path, monkeypatch):
    """A reader keeps reading when its access key is replaced: revoked at the store, the next
    request is refused, stoker runs credential_process again and goes on with the new key; and
    credentials about to expire are fetched again before any refusal."""
    import stoker
    uri, files = dataset
    user = "stoker"
    keys = [(f"STOKERROTATEDKEY{i:04d}", f"rotatedSecret{i:027d}") for i in range(2)]
    for access, secret in keys:
        radosgw_admin(gateway, "key", "create", "--uid", user, "--key-type", "s3",
                      "--access-key", access, "--secret-key", secret)
    creds_file = tmp_path / "creds.json"

    def hand_out(i: int, lifetime: float) -> None:
        creds_file.write_text(json.dumps({"Version": 1, "AccessKeyId": keys[i][0],
                                          "SecretAccessKey": keys[i][1],
                                          "Expiration": iso(lifetime)}))

    # Made before the environment names a profile boto3 would look for.
    first_key, second_key = key_client(gateway, *keys[0]), key_client(gateway, *keys[1])
    hand_out(0, 3600)
    config = write_process_config(tmp_path, "rotating", creds_file)
    env = bare_env(gateway, tmp_path, AWS_CONFIG_FILE=str(config), AWS_PROFILE="rotating")
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    try:
        ds = stoker.Dataset(uri)
        paths = sorted(files)
        thirds = [paths[:10], paths[10:20], paths[20:]]
        assert [ds.read(p) for p in thirds[0]] == [files[p] for p in thirds[0]]
        assert calls(tmp_path) == 1

        # Key 0 revoked at the store, key 1 handed out (short-lived: 6 s).
        radosgw_admin(gateway, "key", "rm", "--uid", user, "--key-type", "s3",
                      "--access-key", keys[0][0])
        wait_until_refused(first_key, keys[0][0])
        hand_out(1, 6)
        assert [ds.read(p) for p in thirds[1]] == [files[p] for p in thirds[1]]
        assert calls(tmp_path) == 2

        # Half their life later, fetched again before the store refuses anything.
        hand_out(1, 3600)
        time.sleep(3.5)
        assert [ds.read(p) for p in thirds[2]] == [files[p] for p in thirds[2]]
        assert calls(tmp_path) == 3
        assert [ds.read(p) for p in paths] == [files[p] for p in paths]
        assert calls(tmp_path) == 3
    finally:
        radosgw_admin(gateway, "key", "rm", "--uid", user, "--key-type", "s3",
                      "--access-key", keys[1][0])
    wait_until_refused(second_key, keys[1][0])

    # The CLI reads the same profile; a process that fails is named with what it said.
    hand_out(1, 3600)
    r = run(env, "ls", uri, check=False)
    assert r.returncode != 0 and "HTTP 403" in r.stderr, r.stderr  # key 1 is gone
    broken = dict(env, AWS_PROFILE="broken")
    r = run(broken, "ls", uri, check=False)
    assert r.returncode != 0
    assert "credential_process of profile 'broken'" in r.stderr \
        and "exited with 2: SSO session expired, run aws sso login" in r.stderr, r.stderr


def test_session_credentials_from_a_process(gateway, sts, dataset, tmp_path):
    """Temporary credentials with a session token (the gateway's STS) through
    credential_process: the CLI verifies every byte with them."""
    uri, _ = dataset
    c = session_credentials(sts)
    creds_file = tmp_path / "creds.json"
    creds_file.write_text(json.dumps({"Version": 1, "AccessKeyId": c["AccessKeyId"],
                                      "SecretAccessKey": c["SecretAccessKey"],
                                      "SessionToken": c["Token"], "Expiration": iso(900)}))
    config = write_process_config(tmp_path, "sts", creds_file)
    env = bare_env(gateway, tmp_path, AWS_CONFIG_FILE=str(config), AWS_PROFILE="sts")
    assert "OK" in run(env, "verify", uri).stdout
    # The same keys without their session token are refused: the token was what signed.
    creds_file.write_text(json.dumps({"Version": 1, "AccessKeyId": c["AccessKeyId"],
                                      "SecretAccessKey": c["SecretAccessKey"]}))
    assert run(env, "verify", uri, check=False).returncode != 0


def test_no_source_at_all_is_one_clear_error(gateway, dataset, tmp_path):
    uri, _ = dataset
    r = run(bare_env(gateway, tmp_path), "ls", uri, check=False)
    assert r.returncode != 0
    assert "no S3 credentials" in r.stderr and "AWS_ACCESS_KEY_ID" in r.stderr \
        and "credential_process" in r.stderr, r.stderr
