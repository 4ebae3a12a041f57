"""What the `stoker` commands that Python runs (pack of Parquet, MDS and LitData; profile) share
with the C++ ones (tools/output.h), so a script sees one convention: errors on stderr as
`stoker COMMAND: ...`, and under --json also {"error": {"code", "message"}} on stdout; exit 1
for a failure, 2 for a bad command line."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from ._core import CorruptionError  # type: ignore[attr-defined]  # see pyproject

# The code of an error (the C++ Status code names), by the exception that carries it.
_ERROR_CODES = ((CorruptionError, "Corruption"), (FileNotFoundError, "NotFound"),
                (FileExistsError, "AlreadyExists"), (PermissionError, "PermissionDenied"),
                (OSError, "IOError"), ((ValueError, TypeError), "InvalidArgument"),
                (ImportError, "Unsupported"))  # a package the input needs is not installed


def error_code(e: BaseException) -> str:
    return next((code for kind, code in _ERROR_CODES if isinstance(e, kind)), "Internal")


def print_json_error(code: str, message: str) -> None:
    print(json.dumps({"error": {"code": code, "message": message}}, indent=2))


def fail(command: str, code: str, message: str, as_json: bool) -> int:
    """Reports a failed command (as tools/output.h's PrintError) and returns its exit status."""
    print(f"stoker {command}: {code}: {message}", file=sys.stderr)
    if as_json:
        print_json_error(code, message)
    return 1


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors, when --json is on the command line, are also a JSON
    document {"error": {"code": "Usage", ...}} on stdout, as the C++ commands' are: a script
    reading the output finds a document, not nothing."""

    _json = False

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        self._json = "--json" in (sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if self._json:
            print_json_error("Usage", message)
        super().error(message)
