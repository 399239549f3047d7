"""The examples in the package's docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import matplotlib
import pytest

import attn_course
import tools

matplotlib.use("Agg")

MODULES = sorted(
    info.name
    for package in (attn_course, tools)  # tools/: contributors' tools beside the package
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
