"""The type stubs of the extension (python/stoker/_core/*.pyi) say what stoker._core really is.

Two checks: mypy.stubtest compares the installed stubs with the imported module (names,
classes, members; tests/python/stubtest_allowlist.txt lists what it cannot introspect in a
nanobind module), and nanobind.stubgen, run on the built module now, must write exactly the
committed stubs, so a changed signature or docstring cannot go unnoticed. After changing a
binding: `python -m nanobind.stubgen -m stoker._core -r -O python/stoker` and commit the result.
"""
import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
STUBS = REPO / "python" / "stoker" / "_core"


def test_the_committed_stubs_are_what_stubgen_writes(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-m", "stoker._core", "-r",
                        "-q", "-O", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    generated = sorted(p.name for p in (tmp_path / "_core").glob("*.pyi"))
    assert generated == sorted(p.name for p in STUBS.glob("*.pyi"))
    for name in generated:
        assert (tmp_path / "_core" / name).read_text() == (STUBS / name).read_text(), (
            f"python/stoker/_core/{name} is stale: regenerate it (see this module's docstring)")


def test_stubtest_finds_the_stubs_consistent_with_the_module():
    import stoker
    installed = pathlib.Path(stoker.__file__).parent / "_core"
    assert sorted(p.name for p in installed.glob("*.pyi")) == ["__init__.pyi", "image.pyi"], (
        "the stubs are not installed beside the extension (pip install .)")
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "stoker._core",
                        "--allowlist", str(REPO / "tests/python/stubtest_allowlist.txt")],
                       capture_output=True, text=True, env={**os.environ, "MYPY_CACHE_DIR":
                                                            os.devnull})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
