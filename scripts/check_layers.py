#!/usr/bin/env python3
"""Fails when a lower layer includes (or imports) a higher one.

The layers are the libraries of src/CMakeLists.txt: each `stoker_library(NAME SOURCES ... DEPS
...)` owns the folder its sources are in, and may include headers only from its own folder, from
the folders of the stoker libraries it depends on (directly or not), and the public headers
(include/stoker/). So `storage/` (stoker_storage, which depends on stoker_common alone) may not
include `net/`, `node/` or `s3/`, and the CMake graph and the includes cannot drift apart. The
graph itself must have no cycle. Tests (`*_test.cc`, `*test_util.h`) and `testing/` are exempt:
a test may use anything below the top.

The Python package is layered too (PYTHON_LAYERS, lowest first): a module of python/stoker may
import, at its top or inside a function, only modules of lower layers, so no two import each
other and none dodges a cycle with an import inside a function; every module must have a
layer. The extension (python/bindings, the `_core` layer) imports no module of stoker's Python.

    python3 scripts/check_layers.py [REPO]      # exit 1 listing every offending include
    python3 scripts/check_layers.py --self-test # shows the check fails on a planted violation
"""
import ast
import pathlib
import re
import sys
import tempfile

LIBRARY = re.compile(r"stoker_library\(\s*(\w+)(.*?)\)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EXEMPT_FOLDERS = {"testing"}

# python/stoker's modules, lowest layer first; "__init__" is the package (`import stoker`).
PYTHON_LAYERS = (
    ("_core",),  # the C++ extension (python/bindings)
    ("_glibc", "_log", "_cli", "metrics", "tracing", "_migrate_io", "_engines"),  # _migrate_io: what the MDS and
    # LitData readers share (files, decompression, raw images)
    ("stalls", "profile", "views", "optimize", "_mds", "_litdata_values"),
    # views: Dataset, its views, reopening; _mds, _litdata_values: the formats' bytes
    ("mix", "sources", "engine_read"),  # mix: the Mix source and the order of a loader over
    # one; engine_read: Ray's and Spark's reads of whole chunks
    ("_reading", "engine_write", "_litdata"),  # _reading: what every loader shares (rank,
    # epochs, orders, a pass's bookkeeping); engine_write: one version from an engine's write
    # tasks; _litdata: LitData's directories (on _litdata_values)
    ("loader", "image_loader", "token_loader", "migrate"),  # migrate: MDS and LitData
    # datasets through sources' writer
    ("torch", "ray", "spark", "_pack_parquet", "_pack_migrate", "__init__"),
)
BINDINGS_IMPORT = re.compile(r'import_\(\s*"(stoker[\w.]*)"')


def libraries(cmake_text):
    """{name: (folder, [stoker deps])} from the stoker_library calls."""
    out = {}
    for name, body in LIBRARY.findall(cmake_text):
        words = body.split()
        sources, deps, current = [], [], None
        for word in words:
            if word in ("SOURCES", "DEPS"):
                current = word
            elif current == "SOURCES":
                sources.append(word)
            elif current == "DEPS" and word.startswith("stoker_"):
                deps.append(word)
        folders = {str(pathlib.PurePosixPath(s).parent) for s in sources}
        if len(folders) != 1:
            raise SystemExit(f"{name}: sources in several folders {sorted(folders)}; "
                             "one library, one folder")
        out[name] = (folders.pop(), deps)
    return out


def closure(libs):
    """{name: set of libraries it depends on, directly or not}; exits on a cycle."""
    done, result = set(), {}

    def visit(name, path):
        if name in path:
            raise SystemExit("dependency cycle: " + " -> ".join(path + [name]))
        if name in done:
            return result[name]
        below = set()
        for dep in libs[name][1]:
            if dep in libs:
                below |= {dep} | visit(dep, path + [name])
        done.add(name)
        result[name] = below
        return below

    for name in libs:
        visit(name, [])
    return result


def folder_of(include, folders):
    """The library folder a quoted include names (the longest matching folder), or None."""
    best = None
    for folder in folders:
        if include.startswith(folder + "/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def check(repo):
    repo = pathlib.Path(repo)
    libs = libraries((repo / "src/CMakeLists.txt").read_text())
    below = closure(libs)
    owner = {folder: name for name, (folder, _) in libs.items()}
    problems = []
    for name, (folder, _) in libs.items():
        allowed = {folder} | {libs[dep][0] for dep in below[name]}
        for path in sorted((repo / "src" / folder).glob("*")):
            if path.suffix not in (".h", ".cc") or path.name.endswith(("_test.cc", "test_util.h")):
                continue
            for include in INCLUDE.findall(path.read_text(errors="replace")):
                if include.startswith("stoker/"):
                    continue
                target = folder_of(include, owner)
                if target is None:
                    if include.split("/")[0] in EXEMPT_FOLDERS:
                        problems.append(f"src/{folder}/{path.name}: includes test helper {include}")
                    continue  # a header beside the file, or a third-party one
                if target not in allowed:
                    problems.append(f"src/{folder}/{path.name} ({name}) includes {include}, "
                                    f"which belongs to {owner[target]}: a library it does not "
                                    "depend on")
    for path in sorted((repo / "include/stoker").glob("*.h")):
        for include in INCLUDE.findall(path.read_text()):
            if not include.startswith("stoker/"):
                problems.append(f"include/stoker/{path.name}: a public header includes "
                                f"internal {include}")
    return problems


def python_imports(path, package="stoker"):
    """The modules of `package` that the module at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:  # from .x import y
                found.add(node.module.split(".")[0])
            else:  # from . import x, y
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] == package:
                found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == package:
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def check_python(repo):
    """Problems with python/stoker's layering (PYTHON_LAYERS) and the extension's imports."""
    repo = pathlib.Path(repo)
    layer = {name: i for i, names in enumerate(PYTHON_LAYERS) for name in names}
    problems = []
    for path in sorted((repo / "python/stoker").glob("*.py")):
        name = path.stem
        if name not in layer:
            problems.append(f"python/stoker/{path.name}: not in PYTHON_LAYERS "
                            "(scripts/check_layers.py): give it a layer")
            continue
        for target in sorted(python_imports(path)):
            if target in layer and layer[target] >= layer[name]:
                problems.append(f"python/stoker/{path.name} imports stoker.{target}, which is "
                                f"not below it (layers {layer[name]} and {layer[target]})")
    for path in sorted((repo / "python/bindings").glob("*")):
        if path.suffix in (".cc", ".h"):
            for module in BINDINGS_IMPORT.findall(path.read_text(errors="replace")):
                problems.append(f"python/bindings/{path.name} imports {module}: the extension "
                                "is the lowest layer and imports none of stoker's Python")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "src/storage").mkdir(parents=True)
        (root / "src/net").mkdir()
        (root / "include/stoker").mkdir(parents=True)
        (root / "src/CMakeLists.txt").write_text(
            "stoker_library(stoker_storage SOURCES storage/a.cc DEPS fmt::fmt)\n"
            "stoker_library(stoker_net SOURCES net/b.cc DEPS stoker_storage)\n")
        (root / "src/net/b.cc").write_text('#include "storage/a.h"\n')
        (root / "src/storage/a.cc").write_text('#include "stoker/status.h"\n')
        assert check(root) == [], check(root)
        (root / "src/storage/a.cc").write_text('#include "net/b.h"\n')
        problems = check(root)
        assert len(problems) == 1 and "net/b.h" in problems[0], problems
        (root / "include/stoker/api.h").write_text('#include "storage/a.h"\n')
        assert len(check(root)) == 2, check(root)
        (root / "python/stoker").mkdir(parents=True)
        (root / "python/bindings").mkdir(parents=True)
        (root / "python/stoker/views.py").write_text("from ._core import Dataset\n")
        (root / "python/stoker/mix.py").write_text("from .views import Dataset\n")
        assert check_python(root) == [], check_python(root)
        (root / "python/stoker/views.py").write_text("def f():\n    from .mix import Mix\n")
        (root / "python/bindings/dataset.cc").write_text('nb::module_::import_("stoker.views")')
        problems = check_python(root)
        assert len(problems) == 2 and "stoker.mix" in problems[0], problems
    print("check_layers self-test: a planted violation is found")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    repo = sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    problems = check(repo) + check_python(repo)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print("layers: every include follows the library graph of src/CMakeLists.txt, every "
          "import of python/stoker the layers of PYTHON_LAYERS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
