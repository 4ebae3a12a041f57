"""What to say when the compiled part of stoker cannot load because the C library is too old.

The wheels from scripts/wheel need glibc 2.28 (manylinux_2_28). pip does not install them on an
older system, but a copied environment or a forced install can still get there; the dynamic
loader then says only "version `GLIBC_2.28' not found". This turns that into what to do.
"""
from __future__ import annotations

import os
import re

_MISSING_VERSION = re.compile(r"version [`']GLIBC_(\d+\.\d+)' not found")


def system_glibc() -> str:
    """The running C library's version ("2.36"), or "unknown" (not glibc: musl, ...)."""
    try:
        name_and_version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return "unknown"
    parts = name_and_version.split()
    return parts[1] if len(parts) == 2 and parts[0] == "glibc" else "unknown"


def explain_import_error(error: ImportError) -> ImportError:
    """A clear ImportError for an extension refused for its glibc version; else `error`."""
    missing = _MISSING_VERSION.search(str(error))
    if missing is None:
        return error
    return ImportError(
        f"stoker's compiled part needs glibc {missing[1]} or later, and this system has glibc "
        f"{system_glibc()}. The stoker wheels need glibc 2.28 (RHEL/Rocky 8, Ubuntu 20.04, "
        "Debian 10 or later); on an older system build stoker from source instead: "
        "pip install --no-binary stoker stoker (docs/install.md). "
        f"The loader said: {error}")
