"""The engine a stoker.ray or stoker.spark import needs, checked once at import: missing, or
older than the APIs stoker uses, is an ImportError naming what was found and what to install."""
from __future__ import annotations

import importlib
from typing import Any


def require(name: str, module: str, minimum: tuple[int, int], pip: str, needs: str) -> Any:
    """The package `name` (importing `module` of it too), at version `minimum` or newer."""
    try:
        package = importlib.import_module(name)
        importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"stoker needs {needs} here: pip install '{pip}' ({name}>="
                          f"{minimum[0]}.{minimum[1]}); importing it failed: {e}") from e
    version = getattr(package, "__version__", "0")
    have = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if have < minimum:
        raise ImportError(f"stoker needs {name} {minimum[0]}.{minimum[1]} or newer ({needs}); "
                          f"this is {name} {version}: pip install -U '{name}>={minimum[0]}."
                          f"{minimum[1]}'")
    return package
