"""The manylinux wheels (scripts/wheel, docs/install.md, issue 18): built here with Zig's clang for
glibc 2.28, then installed as a user would — into clean venvs, with the Debian libraries the
source build links hidden — where the Quick start runs: the CLI packs, verifies, lists, cats,
reads over https and mounts; Python reads the dataset and ImageLoader hands the same tensors as
this checkout's build. `pip install stoker[torch]` from the wheel pulls torch. The abi3 wheel
loads on Python 3.12 and 3.13; the 3.10 wheel on 3.10. The CLI runs on Debian 11 (glibc 2.31),
the oldest Debian these machines can bootstrap, where a compiled part too new for its glibc gets
the clear ImportError.

Slow (the first build compiles the C libraries and stoker for three Pythons: ~20 minutes on two
cores; ccache and /var/tmp/wheel make a rebuild quick), so left out of the quick tier.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import stoker

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "http"))
import servers  # noqa: E402

from test_image_loader import write_photo_tree  # noqa: E402

MAX_WHEEL_BYTES = 12 * 1024 * 1024
# What the source build links from Debian (the list): hidden while the wheel runs.
DEBIAN_LIBRARIES = ["libcurl.so.4", "libarchive.so.13", "libfmt.so.9", "libisal.so.2",
                    "libxxhash.so.0", "libjpeg.so.62", "libpng16.so.16", "liburing.so.2",
                    "libcrypto.so.3", "libssl.so.3", "libfuse3.so.3"]
# What a manylinux_2_28 binary may need: glibc's own libraries.
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                   "ld-linux-x86-64.so.2"}
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")


def find_python(version: str) -> str | None:
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in [shutil.which(f"python{version}"),
                      *sorted(map(str, pyenv.glob(f"{version}.*/bin/python{version}")))]:
        if candidate and subprocess.run([candidate, "-c", "pass"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a mount namespace hides the Debian libraries)"
    for tool in ("unshare", "readelf", "mmdebstrap", "ccache", "nasm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup installs it)"
    for version in ("3.10", "3.11", "3.12", "3.13"):
        if find_python(version) is None:
            return f"no Python {version} (python{version} on PATH or pyenv's)"
    return servers.available()


UNAVAILABLE = _unavailable()
if UNAVAILABLE and os.environ.get("STOKER_REQUIRE_WHEEL", "") not in ("", "0"):
    raise RuntimeError(f"STOKER_REQUIRE_WHEEL is set but: {UNAVAILABLE}")
pytestmark = [pytest.mark.slow, pytest.mark.system,
                pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")]


def run(argv, *, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert r.returncode == 0, f"{argv}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def hidden(argv: list[str], also: dict[str, str] | None = None) -> list[str]:
    """`argv` in a private mount namespace where every Debian library of DEBIAN_LIBRARIES reads
    as an empty file, so nothing can load them; `also` binds more {source: target} there."""
    libraries = sorted({str((LIBDIR / name).resolve()) for name in DEBIAN_LIBRARIES
                        if (LIBDIR / name).exists()})
    assert len(libraries) >= 8, libraries  # scripts/setup installed the source build's libraries
    binds = " && ".join(f"mount --bind {source} {target}" for source, target in
                        [*[("/dev/null", lib) for lib in libraries], *(also or {}).items()])
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{binds} && exec "$@"', "sh", *argv]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """{"cp310"|"cp311"|"abi3": wheel} from one run of scripts/wheel (the sdist beside them)."""
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run(["bash", "scripts/wheel", str(dist)], cwd=ROOT, capture_output=True,
                       text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    # The wheels were built from the sdist (scripts/wheel), which ships beside them.
    assert [p.name for p in dist.glob("*.tar.gz")] == [f"stoker-{stoker.__version__}.tar.gz"]
    assert f"wheel: stoker-{stoker.__version__}.tar.gz" in r.stdout
    found = {}
    for wheel in dist.glob("*.whl"):
        tag = re.fullmatch(r"stoker-[^-]+-(cp3\d+)-(cp3\d+|abi3)-manylinux_2_28_x86_64\.whl",
                           wheel.name)
        assert tag, wheel.name
        found["abi3" if tag[2] == "abi3" else tag[2]] = wheel
    assert set(found) == {"cp310", "cp311", "abi3"}, sorted(found)
    assert found["abi3"].name.split("-")[2] == "cp312"
    return found


@pytest.fixture(scope="module")
def venv311(wheels, tmp_path_factory) -> Path:
    """A clean Python 3.11 venv with the cp311 wheel and its [torch] extra installed."""
    venv = tmp_path_factory.mktemp("venv311")
    run([find_python("3.11"), "-m", "venv", str(venv)])
    run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         f"{wheels['cp311']}[torch]", "torch==2.13.0"])
    return venv


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path_factory.mktemp("photos")
    return src, write_photo_tree(src, 24)


# Run by a clean venv's Python: what the Quick start's Python part does, written down for the
# comparison with this checkout's build.
READ_BACK = """
import hashlib, json, sys
import numpy as np
import stoker
uri, out = sys.argv[1], sys.argv[2]
ds = stoker.Dataset(uri)
files = {ds.stat(i)["path"]: hashlib.sha256(ds.read(i)).hexdigest() for i in range(ds.num_files)}
if out != "-":
    xs, ys = [], []
    for x, y in stoker.ImageLoader(uri, batch_size=8, train=False, size=64, threads=2):
        xs.append(x.numpy()); ys.append(y.numpy())
    np.savez(out, x=np.concatenate(xs), y=np.concatenate(ys))
print(json.dumps({"files": files, "version": stoker.__version__, "core": stoker._core.__file__}))
"""


def digests(files: dict[str, bytes]) -> dict[str, str]:
    return {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}


@pytest.fixture(scope="module")
def packed(venv311, photos, tmp_path_factory) -> Path:
    """The photos packed by the wheel's CLI with the Debian libraries hidden."""
    src, _ = photos
    ds = tmp_path_factory.mktemp("packed") / "photos.stoker"
    run(hidden([str(venv311 / "bin/stoker"), "pack", "-q", "--chunk-size", "256KiB", str(src),
                str(ds)]))
    return ds


def test_wheels_are_small_and_need_nothing_but_glibc_2_28(wheels, tmp_path):
    for tag, wheel in wheels.items():
        assert wheel.stat().st_size <= MAX_WHEEL_BYTES, (wheel.name, wheel.stat().st_size)
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            binaries = [n for n in names if n.endswith(".so") or n.endswith("/scripts/stoker")]
            extension = "_core.abi3.so" if tag == "abi3" else "_core.cpython-"
            assert any(extension in n for n in binaries), names
            assert any(n.endswith("/scripts/stoker") for n in binaries), names
            assert "stoker/jars/stoker-spark.jar" in names, names  # format("stoker-jvm")
            assert not any(".libs/" in n for n in names), "auditwheel had to vendor a library"
            for name in binaries:
                path = tmp_path / tag / Path(name).name
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(z.read(name))
                dynamic = run(["readelf", "--dynamic", "--wide", str(path)]).stdout
                needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
                assert needed <= GLIBC_LIBRARIES, (name, needed - GLIBC_LIBRARIES)
                versions = run(["readelf", "--version-info", "--wide", str(path)]).stdout
                glibc = {tuple(map(int, v.split("."))) for v in
                         re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", versions)}
                assert max(glibc) <= (2, 28), (name, max(glibc))
                assert not re.search(r"GLIBCXX_|CXXABI_", versions), name  # libc++ is inside


def test_the_debian_libraries_are_really_hidden(stoker_exe):
    """The source build's CLI cannot start in the namespace the wheel's runs in."""
    r = subprocess.run(hidden([stoker_exe, "--version"]), capture_output=True, text=True)
    assert r.returncode != 0 and "error while loading shared libraries" in r.stderr, r.stderr


def test_the_quick_start_runs_from_the_wheel(venv311, photos, packed, tmp_path):
    src, files = photos
    cli = str(venv311 / "bin/stoker")
    assert run(hidden([cli, "--version"])).stdout.strip() == f"stoker {stoker.__version__}"
    assert "OK" in run(hidden([cli, "verify", str(packed)])).stdout
    name = sorted(files)[3]
    folder, base = name.split("/")
    listing = run(hidden([cli, "ls", str(packed), folder])).stdout.split()
    assert listing == sorted(n.split("/")[1] for n in files if n.startswith(folder + "/"))
    cat = subprocess.run(hidden([cli, "cat", str(packed), name]), capture_output=True,
                         timeout=120)
    assert cat.returncode == 0 and cat.stdout == files[name]

    out = tmp_path / "batches.npz"
    script = tmp_path / "read_back.py"
    script.write_text(READ_BACK)
    report = json.loads(run(hidden([str(venv311 / "bin/python"), str(script), str(packed),
                                    str(out)]), cwd=tmp_path).stdout)
    assert report["core"].startswith(str(venv311)), report["core"]  # the wheel's, not ours
    assert report["files"] == digests(files)
    # The wheel's decoder (libjpeg-turbo and libpng built by Zig, libc++) hands the same tensors
    # as this checkout's (Debian's libraries, libstdc++).
    ours = [(x.numpy(), y.numpy()) for x, y in
            stoker.ImageLoader(str(packed), batch_size=8, train=False, size=64, threads=2)]
    theirs = np.load(out)
    assert np.array_equal(theirs["y"], np.concatenate([y for _, y in ours]))
    assert np.array_equal(theirs["x"], np.concatenate([x for x, _ in ours]))


def test_stoker_torch_extra_installs_torch(venv311):
    r = run([str(venv311 / "bin/python"), "-c",
             "import importlib.metadata as m, torch; "
             "print(torch.__version__); print(m.requires('stoker'))"])
    version, requires = r.stdout.splitlines()
    assert version.startswith("2.13.0"), version
    assert "extra == \"torch\"" in requires and "torch" in requires


def test_https_from_the_wheel_checks_certificates(venv311, packed, photos, tmp_path):
    """Static curl + OpenSSL: https reads, the CA from SSL_CERT_FILE or the system's bundle
    (found at run time: the bundle path built into OpenSSL is the build machine's)."""
    _, files = photos
    www = tmp_path / "www"
    shutil.copytree(packed, www / "photos.stoker")
    work = tmp_path / "nginx"
    work.mkdir()
    nginx = servers.Nginx(www, work)
    try:
        url = nginx.url("photos.stoker", tls=True)
        cli = str(venv311 / "bin/stoker")
        env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
        refused = subprocess.run(hidden([cli, "verify", url]), capture_output=True, text=True,
                                 env=env, timeout=120)
        assert refused.returncode != 0 and "certificate" in refused.stderr.lower(), \
            refused.stderr
        run(hidden([cli, "verify", url]), env={**env, "SSL_CERT_FILE": str(nginx.ca)})
        # The test CA as this Debian machine's bundle: found without SSL_CERT_FILE.
        bundle = "/etc/ssl/certs/ca-certificates.crt"
        name = sorted(files)[5]
        got = subprocess.run(hidden([cli, "cat", url, name], also={str(nginx.ca): bundle}),
                             capture_output=True, env=env, timeout=120)
        assert got.returncode == 0 and got.stdout == files[name], got.stderr
    finally:
        nginx.stop()


@pytest.mark.mount
def test_the_wheel_mounts_with_its_own_libfuse(venv311, packed, photos, tmp_path):
    _, files = photos
    name = sorted(files)[7]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    out = tmp_path / "file"
    cli = str(venv311 / "bin/stoker")
    run(hidden(["sh", "-c", f'"{cli}" mount --background "{packed}" "{mnt}" && '
                            f'cat "{mnt}/{name}" > "{out}"; status=$?; '
                            f'fusermount3 -u "{mnt}"; exit $status']))
    assert out.read_bytes() == files[name]


@pytest.mark.parametrize("version, tag", [("3.10", "cp310"), ("3.12", "abi3"),
                                          ("3.13", "abi3")])
def test_each_wheel_loads_on_its_pythons(wheels, packed, photos, version, tag, tmp_path):
    _, files = photos
    venv = tmp_path / "venv"
    run([find_python(version), "-m", "venv", str(venv)])
    run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         str(wheels[tag])])
    script = tmp_path / "read_back.py"
    script.write_text(READ_BACK)
    report = json.loads(run(hidden([str(venv / "bin/python"), str(script), str(packed), "-"]),
                            cwd=tmp_path).stdout)
    assert report["files"] == digests(files)
    assert report["core"].endswith(".abi3.so") == (tag == "abi3"), report["core"]


@pytest.fixture(scope="module")
def bullseye(tmp_path_factory) -> Path:
    """Debian 11 (glibc 2.31), bootstrapped with mmdebstrap: the essential packages and a bare
    Python 3.9 — none of the libraries stoker's source build links."""
    root = tmp_path_factory.mktemp("debian11") / "root"
    run(["mmdebstrap", "--variant=essential", "--mode=root", "--quiet",
         "--include=python3-minimal", "bullseye", str(root), "http://deb.debian.org/debian"],
        timeout=900)
    assert "GLIBC 2.31" in run(["chroot", str(root), "ldd", "--version"]).stdout
    return root


def test_the_cli_runs_on_debian_11(wheels, photos, bullseye, tmp_path):
    """The wheel's CLI packs and verifies under glibc 2.31, and what it packed reads back here."""
    src, files = photos
    root = bullseye
    with zipfile.ZipFile(wheels["cp311"]) as z:
        (cli,) = [n for n in z.namelist() if n.endswith("/scripts/stoker")]
        (root / "usr/local/bin/stoker").write_bytes(z.read(cli))
    (root / "usr/local/bin/stoker").chmod(0o755)
    shutil.copytree(src, root / "src")
    run(["chroot", str(root), "stoker", "pack", "-q", "/src", "/photos.stoker"])
    assert "OK" in run(["chroot", str(root), "stoker", "verify", "/photos.stoker"]).stdout
    ds = stoker.Dataset(str(root / "photos.stoker"))
    assert {ds.stat(i)["path"]: ds.read(i) for i in range(ds.num_files)} == files


def test_a_too_old_glibc_is_explained_on_import(bullseye, tmp_path):
    """What a wheel on a too-old glibc meets, for real: a compiled `_core` that needs a newer glibc
    (GLIBC_2.34: pthread_create, built here against Debian 12's 2.36, and nothing but glibc, as
    the wheel's) loaded under glibc 2.31. `import stoker` explains it (python/stoker/_glibc.py)
    instead of the dynamic loader's one line."""
    source = tmp_path / "needs_new_glibc.c"
    source.write_text("#include <pthread.h>\n"
                      "void* stoker_core_needs(void) { return (void*)&pthread_create; }\n")
    target = bullseye / "opt/site/stoker"
    shutil.copytree(Path(stoker.__file__).parent, target,
                    ignore=shutil.ignore_patterns("_core.*", "__pycache__"))
    # Debian 11's Python is 3.9: under the bare name `_core.so` it still tries to load it, and
    # the dynamic loader refuses it for its glibc version before anything else is checked.
    run(["gcc", "-shared", "-fPIC", "-o", str(target / "_core.so"), str(source)])
    r = subprocess.run(["chroot", str(bullseye), "env", "PYTHONPATH=/opt/site", "python3", "-c",
                        "import stoker"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: stoker's compiled part needs glibc 2.34 or later, "
                           "and this system has glibc 2.31."), r.stderr
    assert "pip install --no-binary stoker stoker" in last
    assert "version `GLIBC_2.34' not found" in last  # the loader's words, kept
