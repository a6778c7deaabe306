"""Loads the plain benchmark scripts under bench/ as modules, for their smoke tests."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def load_bench() -> Iterator[Callable[[str], ModuleType]]:
    """`load_bench("gate_overhead")`: bench/gate_overhead.py imported; unloaded afterwards.

    bench/ is on `sys.path` meanwhile, as it is when a script runs, so that the scripts
    find their shared helpers (bench/_measure.py).
    """
    loaded: list[str] = []
    folder = str(_BENCH)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses in the script look their module up
        loaded.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)
    if added:
        sys.path.remove(folder)
