"""stoker.ray and stoker.spark refuse an engine too old for the APIs they use, at import, with
an ImportError naming the version found and the one needed (issue 40's bad input)."""
from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize("module,engine,old,needed", [
    ("stoker.ray", "ray", "2.40.0", "2.60"),
    ("stoker.spark", "pyspark", "3.5.1", "4.0"),
])
def test_an_engine_too_old_is_named_at_import(module, engine, old, needed, monkeypatch):
    real = importlib.import_module(engine)
    monkeypatch.setattr(real, "__version__", old)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError) as e:
        importlib.import_module(module)
    assert old in str(e.value) and needed in str(e.value), e.value
    monkeypatch.setattr(real, "__version__", real.__version__)


def test_a_missing_engine_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    monkeypatch.delitem(sys.modules, "stoker.ray", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'stoker\[ray\]' \(ray>=2.60\)"):
        importlib.import_module("stoker.ray")
