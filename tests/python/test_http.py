"""Read-only datasets behind a plain web server (src/http/, issue 18): http:// and https:// URLs
served by Debian's nginx from the directory a dataset was packed into (tests/http/servers.py).

- every reader (verify, info, ls, cat, the Python API and Loader) reads the dataset over HTTP
  exactly as from the disk, by range GETs, without a listing;
- https with a CA from SSL_CERT_FILE; without it, the certificate is refused;
- a server that answers a range request with the whole file (nginx with `max_ranges 0`) is a
  clear error at once, not retried; answers broken off half-way are retried and, when they
  never come whole, an error naming the file: never data;
- a chunk file truncated on the server is reported by name, as corruption;
- after `stoker gc` removed the oldest versions, the newest is still found (versions/latest);
- writing is refused; a URL without a host, or with a query, is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STOKER, dataset_contents, make_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "http"))
import servers  # noqa: E402

UNAVAILABLE = servers.available()
if UNAVAILABLE and os.environ.get("STOKER_REQUIRE_NGINX", "") not in ("", "0"):
    raise RuntimeError(f"STOKER_REQUIRE_NGINX is set but: {UNAVAILABLE}")
pytestmark = [pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or ""),
              pytest.mark.skipif(STOKER is None, reason="stoker CLI not installed")]


def run(*args, env=None, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([STOKER, *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **(env or {})))
    if check:
        assert r.returncode == 0, f"stoker {' '.join(args)}: {r.returncode}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A web root holding sets/train.stoker (two versions: a pack and an append), the files
    of each version, and nginx serving the root."""
    base = tmp_path_factory.mktemp("http")
    files = make_tree(base / "src", seed=71, classes=3, files_per_class=20, max_size=40_000)
    more = make_tree(base / "more", seed=72, classes=1, files_per_class=5, max_size=40_000,
                     prefix="more-")
    root = base / "www"
    ds = root / "sets" / "train.stoker"
    ds.parent.mkdir(parents=True)
    run("pack", "-q", "--chunk-size", "256KiB", str(base / "src"), str(ds))
    run("pack", "-q", "--append", "--chunk-size", "256KiB", str(base / "more"), str(ds))
    work = base / "nginx"
    work.mkdir()
    nginx = servers.Nginx(root, work)
    yield {"root": root, "ds": ds, "files": {**files, **more}, "nginx": nginx}
    nginx.stop()


def test_an_http_dataset_reads_as_the_local_one(site):
    nginx, url = site["nginx"], site["nginx"].url("sets/train.stoker")
    assert "checked: OK" in run("verify", url).stdout
    info = json.loads(run("info", "--json", url).stdout)
    local = json.loads(run("info", "--json", str(site["ds"])).stdout)
    assert info["version"] == 2 and info["files"] == len(site["files"]), info
    assert {k: v for k, v in info.items() if k != "dataset"} == \
        {k: v for k, v in local.items() if k != "dataset"}
    name = sorted(site["files"])[7]
    assert run("ls", url, name.split("/")[0]).stdout.split() == \
        run("ls", str(site["ds"]), name.split("/")[0]).stdout.split()
    cat = subprocess.run([STOKER, "cat", url, name], capture_output=True, timeout=60)
    assert cat.returncode == 0 and cat.stdout == site["files"][name]

    import stoker
    assert dataset_contents(stoker.Dataset(url)) == site["files"]
    loader = stoker.Loader(url, shuffle="chunk", seed=5)
    got = {path: hashlib.sha256(data).hexdigest() for data, _label, path in loader}
    assert got == {p: hashlib.sha256(b).hexdigest() for p, b in site["files"].items()}

    # By HEAD and range GETs (206) only: no listing was asked for, no chunk fetched whole.
    log = nginx.access_log()
    chunk_gets = re.findall(r'"GET /sets/train\.stoker/chunks/\S+ HTTP/1\.1" (\d+)', log)
    assert chunk_gets and set(chunk_gets) == {"206"}, set(chunk_gets)
    assert not re.search(r'"GET /sets/train\.stoker/(versions|chunks|segments)?/? ', log)


def test_https_checks_the_certificate_against_ssl_cert_file(site):
    nginx = site["nginx"]
    url = nginx.url("sets/train.stoker", tls=True)
    trusted = run("verify", url, env={"SSL_CERT_FILE": str(nginx.ca)})
    assert "checked: OK" in trusted.stdout
    untrusted = run("verify", url, check=False)
    assert untrusted.returncode == 1, untrusted.stdout + untrusted.stderr
    assert "certificate" in untrusted.stderr.lower() and url in untrusted.stderr, untrusted.stderr


def test_a_server_that_ignores_ranges_is_a_clear_error_at_once(site):
    nginx = site["nginx"]
    url = nginx.url("sets/train.stoker", whole=True)  # nginx's max_ranges 0
    gets = re.compile(r'"GET /whole/sets/train\.stoker/(segments|chunks)/')
    before = len(gets.findall(nginx.access_log()))
    r = run("verify", url, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "does not serve byte ranges" in r.stderr and "/whole/sets/train.stoker/" in r.stderr, \
        r.stderr
    # Not retried (the server will not change its mind): the first ranged GET fails.
    assert len(gets.findall(nginx.access_log())) - before == 1


def test_answers_broken_off_are_retried_and_never_taken_for_data(site):
    flaky = servers.FlakyServer(site["root"], truncate=4)
    try:
        url = flaky.url("sets/train.stoker")
        assert "checked: OK" in run("verify", url).stdout
        assert flaky.truncated == 4
        name = sorted(site["files"])[3]
        cat = subprocess.run([STOKER, "cat", url, name], capture_output=True, timeout=60)
        assert cat.returncode == 0 and cat.stdout == site["files"][name]
    finally:
        flaky.stop()
    broken = servers.FlakyServer(site["root"], truncate=-1)
    try:
        r = run("cat", broken.url("sets/train.stoker"), sorted(site["files"])[3], check=False)
        assert r.returncode == 1 and not r.stdout, r.stderr
        assert "after 5 attempts" in r.stderr and broken.url("sets/train.stoker") in r.stderr, \
            r.stderr
    finally:
        broken.stop()


def test_a_chunk_truncated_on_the_server_is_named(site, tmp_path):
    copy = site["root"] / "damaged.stoker"
    shutil.copytree(site["ds"], copy)
    try:
        chunk = sorted((copy / "chunks").iterdir())[0]
        chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
        url = site["nginx"].url("damaged.stoker")
        r = run("verify", url, check=False)
        assert r.returncode == 3, r.stdout + r.stderr
        assert chunk.name in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        shutil.rmtree(copy)


def test_after_gc_the_newest_version_is_still_found(site, tmp_path):
    ds = site["root"] / "grown.stoker"
    for i in range(3):
        make_tree(tmp_path / f"v{i}", seed=80 + i, classes=1, files_per_class=3, max_size=5_000,
                  prefix=f"v{i}-")
        run("pack", "-q", *(["--append"] if i else []), str(tmp_path / f"v{i}"), str(ds))
    url = site["nginx"].url("grown.stoker")
    assert json.loads(run("info", "--json", url).stdout)["version"] == 3
    gc = json.loads(run("gc", "--json", "--keep", "1", str(ds)).stdout)
    assert gc["versions_removed"] == [1, 2], gc
    assert (ds / "versions" / "latest").read_text() == "3\n"
    assert json.loads(run("info", "--json", url).stdout)["version"] == 3
    assert "checked: OK" in run("verify", url).stdout
    shutil.rmtree(ds)


def test_writes_and_bad_urls_are_refused(site, tmp_path):
    url = site["nginx"].url("sets/train.stoker")
    make_tree(tmp_path / "src", seed=90, classes=1, files_per_class=2, max_size=1_000,
              prefix="new-")
    for args in (["pack", "-q", "--append", str(tmp_path / "src"), url], ["gc", url]):
        r = run(*args, check=False)
        assert r.returncode != 0 and "read-only" in r.stderr, r.stderr
    missing = run("info", site["nginx"].url("no/such.stoker"), check=False)
    assert missing.returncode == 1 and "not a stoker dataset" in missing.stderr, missing.stderr
    for bad, says in (("http:///x", "no host"), (url + "?v=1", "no query")):
        r = run("info", bad, check=False)
        assert r.returncode != 0 and says in r.stderr, r.stderr
