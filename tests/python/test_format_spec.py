"""docs/format.md is a specification: its worked example (§8) must be a dataset.

The example's files are rebuilt from the document's own listings at test time: the hex dumps of
§8.1 (the chunk) and §8.2 (the segment) and the text of §8.3 (the version record), written under
the names the document gives. stoker must then read them as the files that §8's commands pack,
byte for byte, and `stoker verify` must pass. So a listing that drifts from the format (a byte
edited, a line dropped, a size misstated) fails here, and so does a writer that drifts from the
listing: a fresh pack of the same tree must give every byte the listings do not mark `*`
(random ids, the time, and the CRCs over them).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import stoker

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"

# A dump line: a 4-digit hex offset, two spaces, the bytes as hex fields apart by one space,
# then (two or more spaces) what they are; a trailing `*` marks bytes that change from run to run.
HEX_LINE = re.compile(r"([0-9a-f]{4})  ((?:[0-9a-f]{2})+(?: (?:[0-9a-f]{2})+)*)(?:  +(.*))?")
RECORD_MARK = re.compile(r" +\*$")


def subsection(doc: str, heading: str) -> str:
    """The text of the subsection whose heading starts with `heading`, up to the next heading."""
    match = re.search(rf"^#+ {re.escape(heading)}.*?$(.*?)(?=^#)", doc, re.M | re.S)
    assert match, f"docs/format.md has no heading '{heading}'"
    return match.group(1)


def code_block(text: str) -> str:
    blocks = re.findall(r"^```\n(.*?)^```$", text, re.M | re.S)
    assert len(blocks) == 1, f"expected one listing, found {len(blocks)}"
    return blocks[0]


def dataset_path(text: str, directory: str) -> str:
    """The file name a subsection gives: `chunks/<id>.chunk`, `segments/<id>.seg`, ..."""
    names = re.findall(rf"`({directory}/[0-9a-f]{{16}}\.[a-z]+)`", text)
    assert names, f"no {directory}/ file named"
    return names[0]


def hex_dump(listing: str) -> tuple[bytes, list[tuple[int, bytes, bool]]]:
    """The bytes of an xxd-style listing, and its lines as (offset, bytes, marked `*`).

    Caption lines are indented; every other line must be a dump line continuing exactly where
    the one before ends, so that the listing shows every byte of the file.
    """
    out = bytearray()
    lines = []
    for line in listing.splitlines():
        if not line.strip() or line.startswith(" "):
            continue
        m = HEX_LINE.fullmatch(line)
        assert m, f"not a dump line: {line!r}"
        offset = int(m.group(1), 16)
        assert offset == len(out), f"{line!r}: offset {offset:#x}, but the bytes before end at " \
                                   f"{len(out):#x} (a line is missing or miscounted)"
        data = bytes.fromhex(m.group(2).replace(" ", ""))
        out += data
        lines.append((offset, data, (m.group(3) or "").rstrip().endswith("*")))
    return bytes(out), lines


def record_text(listing: str) -> tuple[bytes, list[tuple[str, bool]]]:
    """§8.3's record: each line without its `*` mark and the spaces before it, ending in LF."""
    lines = [(RECORD_MARK.sub("", line), bool(RECORD_MARK.search(line)))
             for line in listing.splitlines()]
    return "".join(f"{text}\n" for text, _ in lines).encode("ascii"), lines


def example() -> dict:
    """Everything §8 says: the commands' inputs, the stated sizes and the three files."""
    doc = DOC.read_text(encoding="utf-8")
    intro = subsection(doc, "8. Worked example")
    commands = code_block(intro)
    tree = {}
    for text, path in re.findall(r"^printf '(.*?)' +> tree/(\S+)$", commands, re.M):
        tree[path] = text.encode("ascii").decode("unicode_escape").encode("ascii")
    attrs = re.search(r"^printf '(.*?)\\n' +> attrs\.jsonl$", commands, re.M)
    assert tree and attrs, "§8's commands no longer write the tree and attrs.jsonl"
    sizes = re.search(r"one chunk file \((\d+) bytes\), one segment \((\d+) bytes\) and the "
                      r"record of\s+version 1 \((\d+) bytes\)", intro)
    assert sizes, "§8 no longer states the files' sizes"

    chunk, segment, record = (subsection(doc, h) for h in ("8.1", "8.2", "8.3"))
    chunk_bytes, chunk_lines = hex_dump(code_block(chunk))
    segment_bytes, segment_lines = hex_dump(code_block(segment))
    record_bytes, record_lines = record_text(code_block(record))
    return {
        "tree": tree,
        "attributes": json.loads(attrs.group(1)),
        "commands": commands,
        "files": {
            dataset_path(chunk, "chunks"): (chunk_bytes, int(sizes.group(1))),
            dataset_path(segment, "segments"): (segment_bytes, int(sizes.group(2))),
            dataset_path(record, "versions"): (record_bytes, int(sizes.group(3))),
        },
        "chunk_lines": chunk_lines,
        "segment_lines": segment_lines,
        "record_lines": record_lines,
    }


@pytest.fixture(scope="module")
def spec() -> dict:
    return example()


def test_the_worked_example_rebuilt_from_the_document_is_a_dataset(tmp_path, spec, stoker_cli):
    ds = tmp_path / "ds"
    for name, (data, stated) in spec["files"].items():
        assert len(data) == stated, f"{name}: the listing holds {len(data)} bytes, §8: {stated}"
        (ds / name).parent.mkdir(parents=True, exist_ok=True)
        (ds / name).write_bytes(data)

    d = stoker.Dataset(str(ds))
    assert (d.version, d.num_files, d.num_samples, d.num_chunks) == (1, 3, 3, 1)
    assert list(d.classes) == ["cat", "dog"]
    # Indices in key order, labels from the first-level directories (§8's prose).
    assert [d.stat(i)["path"] for i in range(d.num_files)] == sorted(spec["tree"])
    for path, data in spec["tree"].items():
        assert d.read(path) == data, path
        st = d.stat(path)
        assert st["label"] == list(d.classes).index(path.split("/")[0]), path
    # Attributes: every member but "path", strings as their bytes, others as compact JSON.
    attrs = spec["attributes"]
    expected = {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                for k, v in attrs.items() if k != "path"}
    got = {k: v.decode() if isinstance(v, bytes) else v
           for k, v in d.stat(attrs["path"])["attributes"].items()}
    assert got == expected

    verified = stoker_cli("verify", ds)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_fresh_pack_gives_every_byte_the_listings_do_not_mark(tmp_path, spec, stoker_cli):
    """§8: "every other byte is the same on every run and machine"."""
    tree = tmp_path / "tree"
    for path, data in spec["tree"].items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    attrs = tmp_path / "attrs.jsonl"
    attrs.write_text(json.dumps(spec["attributes"]) + "\n")
    pack = re.search(r"^stoker pack tree ds (.*) --attributes attrs\.jsonl$", spec["commands"],
                     re.M)
    assert pack, "§8's pack command changed: update this test"
    ds = tmp_path / "ds"
    stoker_cli("pack", tree, ds, *pack.group(1).split(), "--attributes", attrs, check=True)

    def only(directory: str) -> bytes:
        files = list((ds / directory).iterdir())
        assert len(files) == 1, files
        return files[0].read_bytes()

    for directory, lines in (("chunks", spec["chunk_lines"]),
                             ("segments", spec["segment_lines"])):
        fresh = only(directory)
        assert len(fresh) == sum(len(data) for _, data, _ in lines), directory
        for offset, data, marked in lines:
            got = fresh[offset:offset + len(data)]
            assert marked or got == data, \
                f"{directory} at {offset:#06x}: {got.hex()}, the listing says {data.hex()}"
    fresh_record = only("versions").decode("ascii").splitlines()
    assert len(fresh_record) == len(spec["record_lines"])
    for line, (listed, marked) in zip(fresh_record, spec["record_lines"]):
        if not marked:
            assert line == listed
        else:
            assert line.split(" ")[0] == listed.split(" ")[0]
