#!/usr/bin/env python3
"""Writes what is derived from the option tables, each goes between BEGIN/END GENERATED markers;
nothing else is touched:
  - from the image transform's (decode/transform_option_table.cc, read through
    stoker._core.transform_options()): stoker.ImageLoader's keyword arguments, the dict it hands
    to C++ and their docs (python/stoker/image_loader.py), and the option table in
    docs/augment.md;
  - from pack's (dataset/pack_option_table.cc, stoker._core.pack_options()): the table of
    `stoker pack`'s flags and stoker.pack's keyword arguments in README.md. (stoker.pack's
    signature and docstring are made from the table when the module registers it, and the CLI
    registers its flags from it.);
  - from the loader's (loader/loader_option_table.cc, stoker._core.loader_options()):
    stoker.Loader's keyword arguments, the dict it checks and their docs
    (python/stoker/loader.py), and those of the options stoker.ImageLoader, TokenLoader and
    stoker.torch.StokerIterableDataset share with it at the same default (image_loader.py,
    token_loader.py, torch.py: SHARING).

    python scripts/gen_options.py          # rewrite the generated parts
    python scripts/gen_options.py --check  # exit 1 (and say where) if any is stale

Run it after adding or changing an option of any (and rebuilding stoker._core);
tests/python/test_options.py runs --check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGE_LOADER = REPO / "python" / "stoker" / "image_loader.py"
LOADER = REPO / "python" / "stoker" / "loader.py"
DOCS = REPO / "docs" / "augment.md"
README = REPO / "README.md"
SOURCES = ("src/decode/transform_option_table.cc, src/dataset/pack_option_table.cc, "
           "src/loader/loader_option_table.cc")
# The docstring line after which the options' docs are generated, up to the next blank line:
# the table's own options (ImageLoader's transform, Loader's), and the loader options that
# ImageLoader shares.
DOC_HEADING = "generated from it by scripts/gen_options.py):"
SHARED_DOC_HEADING = "src/loader/loader_option_table.cc):"
# Loader options whose default differs in stoker.ImageLoader, which declares them itself:
# batch_size (positional, 256) and shuffle (None: chunk when training, else sequential).
IMAGE_LOADER_OWN = ("batch_size", "shuffle")
# Other readers and the loader options they share, at the table's defaults: TokenLoader (whose
# shuffle takes fewer choices, and which reads whole chunks: no byte budget or unit) and
# stoker.torch's IterableDataset (a smaller memory_budget per DataLoader worker, no batches).
SHARING = (
    (REPO / "python" / "stoker" / "token_loader.py",
     ("seed", "window", "drop_last", "rank", "world_size")),
    (REPO / "python" / "stoker" / "torch.py",
     ("shuffle", "seed", "window", "drop_last", "rank", "world_size", "io_depth", "block_size")),
)

ANNOTATIONS = {
    "bool": "bool", "unsigned": "int", "number": "float", "choice": "str",
    "pair": "float | Sequence[float]", "triple": "Sequence[float]", "size": "int | Sequence[int]",
    "byte size": "int | str", "texts": "Sequence[str]",
}


def without(table: list[dict], names: tuple[str, ...]) -> list[dict]:
    return [o for o in table if o["name"] not in names]


def annotation(option: dict) -> str:
    """The parameter's type; a nullable option (default None: the loader chooses) takes None."""
    kind = ANNOTATIONS[option["kind"]]
    return kind if option["default"] is not None else kind + " | None"


def literal(value) -> str:
    """Python source for a default, strings in the double quotes the code base uses."""
    if isinstance(value, str):
        return '"' + value + '"'
    return repr(value)


def wrap(pieces: list[str], first: str, rest: str, width: int = 100) -> list[str]:
    """`pieces` joined by spaces into lines of at most `width` columns: the first line starts
    with `first`, the others with `rest`."""
    lines, line = [], first
    for piece in pieces:
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = rest
        line += piece + " "
    lines.append(line.rstrip())
    return lines


def signature(table: list[dict]) -> list[str]:
    """Keyword-only parameters, with the signature's indent."""
    indent = " " * 17
    return wrap([f"{o['name']}: {annotation(o)} = {literal(o['default'])},"
                 for o in table], indent, indent)


def as_dict(table: list[dict]) -> list[str]:
    return [f"            {o['name']!r}: {o['name']}," for o in table]


def docstring(table: list[dict]) -> list[str]:
    out = []
    for o in table:
        out += wrap(o["doc"].split(), f"      {o['name']}: ", "        ")
    return out


def docs_table(table: list[dict]) -> list[str]:
    out = ["| option | type | default | what |", "|---|---|---|---|"]
    for o in table:
        kind = o["kind"] if o["kind"] != "choice" else " / ".join(o["choices"])
        out.append(f"| `{o['name']}` | {kind} | `{literal(o['default'])}` | {o['doc']} |")
    return out


def pack_docs_table(table: list[dict]) -> list[str]:
    out = ["| flag | keyword | type | default | what |", "|---|---|---|---|---|"]
    for o in table:
        kind = o["kind"] if o["kind"] != "choice" else " / ".join(o["choices"])
        flag = "--" + o["name"].replace("_", "-")
        out.append(f"| `{flag}` | `{o['name']}` | {kind} | `{o['text']}` | {o['doc']} |")
    return out


def replace(text: str, tag: str, body: list[str], path: Path) -> str:
    """`text` with the lines between the BEGIN/END GENERATED `tag` markers replaced by `body`."""
    lines = text.split("\n")
    begin = [i for i, line in enumerate(lines) if f"BEGIN GENERATED {tag}" in line]
    end = [i for i, line in enumerate(lines) if f"END GENERATED {tag}" in line]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        sys.exit(f"gen_options: {path}: expected one BEGIN/END GENERATED {tag} pair")
    return "\n".join(lines[:begin[0] + 1] + body + lines[end[0]:])


def replace_after(text: str, heading: str, body: list[str], path: Path) -> str:
    """`text` with the lines from the one after `heading` to the next blank line replaced by
    `body` (a docstring has no room for marker comments)."""
    lines = text.split("\n")
    begin = [i for i, line in enumerate(lines) if heading in line]
    if len(begin) != 1:
        sys.exit(f"gen_options: {path}: expected one line holding {heading!r}")
    end = next(i for i in range(begin[0] + 1, len(lines) + 1)
               if i == len(lines) or not lines[i].strip())
    return "\n".join(lines[:begin[0] + 1] + body + lines[end:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="fail if a generated part is stale")
    check = p.parse_args().check
    from stoker._core import loader_options, pack_options, transform_options
    table = transform_options()
    loader_table = loader_options()
    shared = [o for o in loader_table if o["name"] not in IMAGE_LOADER_OWN]

    image_loader = IMAGE_LOADER.read_text()
    new_image_loader = replace(image_loader, "signature", signature(table), IMAGE_LOADER)
    new_image_loader = replace(new_image_loader, "dict", as_dict(table), IMAGE_LOADER)
    new_image_loader = replace_after(new_image_loader, DOC_HEADING, docstring(table),
                                     IMAGE_LOADER)
    new_image_loader = replace(new_image_loader, "shared-signature", signature(shared),
                               IMAGE_LOADER)
    new_image_loader = replace(new_image_loader, "shared-dict", as_dict(shared), IMAGE_LOADER)
    new_image_loader = replace_after(new_image_loader, SHARED_DOC_HEADING, docstring(shared),
                                     IMAGE_LOADER)
    loader = LOADER.read_text()
    # batch_size is every loader's second positional parameter, with its own default.
    new_loader = replace(loader, "signature", signature(without(loader_table, ("batch_size",))),
                         LOADER)
    new_loader = replace(new_loader, "dict", as_dict(loader_table), LOADER)
    new_loader = replace_after(new_loader, DOC_HEADING, docstring(loader_table), LOADER)
    generated = [(IMAGE_LOADER, image_loader, new_image_loader), (LOADER, loader, new_loader)]
    for path, names in SHARING:
        text = path.read_text()
        options = [o for o in loader_table if o["name"] in names]
        new = replace(text, "shared-signature", signature(options), path)
        new = replace(new, "shared-dict", as_dict(options), path)
        new = replace_after(new, SHARED_DOC_HEADING, docstring(options), path)
        generated.append((path, text, new))
    docs = DOCS.read_text()
    new_docs = replace(docs, "options", docs_table(table), DOCS)
    readme = README.read_text()
    new_readme = replace(readme, "pack-options", pack_docs_table(pack_options()), README)

    files = (*generated, (DOCS, docs, new_docs), (README, readme, new_readme))
    stale = [path for path, old, new in files if old != new]
    if check:
        for path in stale:
            print(f"gen_options: {path.relative_to(REPO)} is stale: run "
                  f"python scripts/gen_options.py (the tables: {SOURCES})", file=sys.stderr)
        return 1 if stale else 0
    for path, old, new in files:
        if old != new:
            path.write_text(new)
    for path in stale:
        print(f"gen_options: rewrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
