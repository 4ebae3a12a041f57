"""What a user meets installing and calling the Python package (issue 14, item 9): the torch
extra, a clear error without torch, pack's progress on a terminal, errors that name Python
keywords, and one syntax for sizes in the CLI and in Python."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import stoker
from conftest import make_tree, run_on_pty


@pytest.fixture
def small(tmp_path):
    src = tmp_path / "src"
    files = make_tree(src, seed=5, classes=2, files_per_class=30, max_size=2000)
    stoker.pack(src, tmp_path / "ds", chunk_size="8KiB")
    return src, tmp_path / "ds", files


def test_torch_is_an_extra():
    meta = importlib.metadata.metadata("stoker")
    assert "torch" in meta.get_all("Provides-Extra")
    assert any(r.startswith("torch") and 'extra == "torch"' in r
               for r in meta.get_all("Requires-Dist"))


def test_image_loader_without_torch_fails_when_made_with_the_install_hint(small):
    _, ds, _ = small
    script = ("import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
              "import stoker\n"
              f"stoker.Loader({str(ds)!r})  # needs no torch\n"
              f"stoker.ImageLoader({str(ds)!r}, batch_size=4)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "ImportError: stoker.ImageLoader yields torch tensors and needs PyTorch: " \
           "pip install 'stoker[torch]'" in proc.stderr, proc.stderr


def test_python_pack_shows_the_cli_progress_bar_on_a_terminal(small, tmp_path):
    src, _, files = small

    def script(dst: str, extra: str = "") -> list[str]:
        return [sys.executable, "-c",
                f"import stoker; stoker.pack({str(src)!r}, {str(tmp_path / dst)!r}{extra})"]

    rc, terminal = run_on_pty(script("p"))
    assert rc == 0
    assert "pack [" in terminal and f"/{len(files)} files" in terminal
    assert terminal.endswith("\r\x1b[2K")
    rc, terminal = run_on_pty(script("q", ", progress=False"))
    assert rc == 0 and terminal == ""
    # Not a terminal: nothing.
    proc = subprocess.run(script("r"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""


def test_pack_errors_name_python_keywords_not_cli_flags(small, tmp_path):
    src, ds, _ = small
    with pytest.raises(FileExistsError) as exists:
        stoker.pack(src, ds)
    assert "append=True" in str(exists.value) and "--append" not in str(exists.value)
    with pytest.raises(FileNotFoundError) as missing:
        stoker.pack(src, tmp_path / "nothing-here", append=True)
    assert "append=True" in str(missing.value) and "--" not in str(missing.value)


def test_sizes_take_one_syntax_everywhere(small, stoker_cli, tmp_path):
    _, ds, files = small
    assert sum(1 for _ in stoker.Loader(ds, memory_budget="64MiB")) == len(files)
    assert sum(1 for _ in stoker.Loader(ds, memory_budget=64 << 20)) == len(files)
    with pytest.raises(ValueError, match=r"memory_budget: '1.5G' is not a size"):
        stoker.Loader(ds, memory_budget="1.5G").__iter__().__next__()
    assert stoker.byte_size("48G") == 48 << 30 and stoker.byte_size("2T") == 2 << 40
    # The CLI: every size option takes the same text, and names the option when it is wrong.
    for command in (["serve", "--listen", "127.0.0.1:0", "--dataset", f"d={ds}",
                     "--memory-limit"], ["mount", str(ds), str(tmp_path), "--buffer-limit"],
                    ["pack", str(ds), str(tmp_path / "x"), "--chunk-size"]):
        proc = stoker_cli(*command, "1.5G", timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert f"{command[-1]}: '1.5G' is not a size" in proc.stderr
