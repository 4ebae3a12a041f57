"""A wheel on a too-old glibc (issue 18): `import stoker` says what is wrong and what to do
instead of only the dynamic loader's "version `GLIBC_2.28' not found"."""
from __future__ import annotations

import os

from stoker._glibc import explain_import_error, system_glibc


def test_an_old_glibc_gets_a_clear_import_error():
    loader_said = ImportError("/venv/lib/python3.11/site-packages/stoker/_core.abi3.so: "
                              "/lib64/libc.so.6: version `GLIBC_2.28' not found (required by "
                              "/venv/lib/python3.11/site-packages/stoker/_core.abi3.so)")
    explained = explain_import_error(loader_said)
    assert isinstance(explained, ImportError)
    message = str(explained)
    assert "needs glibc 2.28 or later" in message
    assert f"this system has glibc {system_glibc()}" in message
    assert "pip install --no-binary stoker stoker" in message
    assert "GLIBC_2.28' not found" in message  # the loader's own words are kept


def test_other_import_errors_pass_unchanged():
    other = ImportError("No module named 'stoker._core'")
    assert explain_import_error(other) is other


def test_the_system_glibc_is_read():
    assert system_glibc() == os.confstr("CS_GNU_LIBC_VERSION").split()[1]
