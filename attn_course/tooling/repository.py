"""Where the course lives: its repository, the revision notebooks install, and Colab links.

`REPOSITORY` is the one place that names the course's repository. `attn-course release` writes
every notebook's "Open in Colab" badge and setup cell from it, so after changing it run
`make release` and commit. The revision is the release tag of the package's version
(`v0.1.0`), so a notebook opened on Colab installs the package it was released with, and
notebooks do not change on every commit.

>>> colab_url("notebooks", "02_scaling.ipynb")
'https://colab.research.google.com/github/attn-course/attn-course/blob/v0.1.0/notebooks/02_scaling.ipynb'

Introduced with the Colab badges of every notebook.
"""

from __future__ import annotations

from attn_course import __version__

REPOSITORY = "https://github.com/attn-course/attn-course"
"""The course's GitHub repository. A placeholder: change it here when the course is published."""

REVISION = f"v{__version__}"
"""The git revision notebooks link to and install: the tag of the package's version."""

PACKAGE = "attn-course"
"""The distribution name pip knows the course package by."""

INSTALL_SPEC_VARIABLE = "ATTN_COURSE_INSTALL_SPEC"
"""Environment variable that, when set, replaces the setup cell's `pip install` arguments
(split like a shell command line; the tests install from a local checkout with it)."""

_GITHUB = "https://github.com/"


def github_slug(repository: str = REPOSITORY) -> str:
    """The repository's "owner/name" on GitHub.

    >>> github_slug("https://github.com/someone/course.git")
    'someone/course'
    """
    if not repository.startswith(_GITHUB):
        raise ValueError(f"the course repository must be on GitHub (for Colab links), got {repository!r}")
    slug = repository.removeprefix(_GITHUB).removesuffix("/").removesuffix(".git")
    if slug.count("/") != 1:
        raise ValueError(f"expected {_GITHUB}OWNER/NAME, got {repository!r}")
    return slug


def colab_url(folder: str, name: str, *, repository: str = REPOSITORY, revision: str = REVISION) -> str:
    """Colab's address of the notebook `folder/name` at `revision` of the repository."""
    return (
        f"https://colab.research.google.com/github/{github_slug(repository)}/blob/{revision}/{folder}/{name}"
    )


def install_requirement(*, repository: str = REPOSITORY, revision: str = REVISION) -> str:
    """The pip requirement that installs the course package at `revision` from its repository.

    >>> install_requirement()
    'attn-course @ git+https://github.com/attn-course/attn-course@v0.1.0'
    """
    return f"{PACKAGE} @ git+{repository.removesuffix('/')}@{revision}"
