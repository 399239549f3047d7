"""attn_course: the helper package of a hands-on course that derives self-attention.

Each notebook imports exactly what it introduced from here: reference implementations
(`attn_course.reference`), autograder checks (`attn_course.checks`), and by role `plots/`,
`explorers/`, `demos/` and `triton_flash/` (docs/contributors.md, "Where code goes").
"""

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _source_tree_version() -> str:
    """The version pyproject.toml beside the package states, for a source tree that is not installed."""
    try:
        pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject, flags=re.MULTILINE)
    return found.group(1) if found else "0+unknown"


try:
    __version__ = version("attn-course")
    """The package's version: pyproject.toml's, as the installed package's metadata records it."""
except PackageNotFoundError:
    __version__ = _source_tree_version()
