"""The examples in the package's docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import matplotlib
import pytest

import attn_course

matplotlib.use("Agg")

MODULES = sorted(info.name for info in pkgutil.walk_packages(attn_course.__path__, prefix="attn_course."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
