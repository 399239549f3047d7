"""A file-system sandbox for a learner's kernel, with Linux Landlock: write only in its own folder.

The grader runs each notebook in a temporary copy of its learner's folder. This sandbox makes
that copy's temporary tree (and /dev) the only place the kernel may create, change or delete
files, and hides the submissions, the grades and Jupyter's connection files from it, even by
absolute path. It is applied inside the kernel process before any learner code runs (by
`_launch.py` and by the kernel factory in `kernel_factory.py`), and neither that process nor anything it
starts can lift it.

Where the system has no Landlock (not Linux, a kernel older than 5.13, or Landlock turned off),
`landlock_abi()` is 0, kernels run without the sandbox, and the grader's summary says so.

Standard library only: it runs in the launcher before the kernel starts.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Sequence

ENV = "ATTN_COURSE_SANDBOX"
"""Environment variable holding the kernel's policy: JSON {"writable": [...], "hidden": [...]}."""

# Landlock's system calls have the same numbers on every architecture (include/uapi/asm-generic).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 1, 1 << 2, 1 << 3
_WRITE_TREE = (  # ABI 1: every way of changing the tree: remove, make char/dir/reg/sock/fifo/block/sym
    (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
)
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2 (link or rename across folders), ABI 3 (truncate)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def landlock_abi() -> int:
    """The Landlock ABI version this system offers; 0 where there is none."""
    libc = _libc()
    if libc is None:
        return 0
    flags = ctypes.c_uint32(_CREATE_RULESET_VERSION)
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), flags)
    return max(int(version), 0)


def policy(writable: list[str], hidden: list[str]) -> str:
    """The value of `ENV` for a kernel that may write beneath `writable` and must not read `hidden`."""
    return json.dumps({"writable": [os.path.abspath(p) for p in writable],
                       "hidden": [os.path.abspath(p) for p in hidden]})  # fmt: skip


def _strict_ancestors(path: str) -> set[str]:
    found: set[str] = set()
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return found
        found.add(parent)
        path = parent


def _reaches(real: str, hidden: set[str], partial: set[str]) -> bool:
    """Whether `real` is, lies in, or holds a hidden tree."""
    return real in partial or any(real == h or real.startswith(h.rstrip("/") + "/") for h in hidden)


def readable_roots(hidden: list[str]) -> list[str]:
    """Paths whose trees together hold everything on the system except the `hidden` trees."""
    hidden_set = {os.path.realpath(path) for path in hidden}
    partial = set().union(*(_strict_ancestors(path) for path in hidden_set)) if hidden_set else set()
    roots: list[str] = []

    def walk(folder: str) -> None:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            if path in hidden_set:
                continue
            if path in partial:
                walk(path)
            elif not os.path.islink(path) or not _reaches(os.path.realpath(path), hidden_set, partial):
                roots.append(path)  # a rule follows a link: one into a hidden tree would open it

    if "/" in hidden_set:
        return []
    walk("/")
    return roots


def _add(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    """Allow `access` beneath `path` (a file gets only the file rights); skip what cannot be opened."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _READ_FILE | _WRITE_FILE | _TRUNCATE
        rule = _PathBeneathAttr(access, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"landlock_add_rule({path}): {os.strerror(error)}")
    finally:
        os.close(fd)


def restrict(writable: list[str], hidden: list[str], readable: Sequence[str] = ()) -> bool:
    """Sandbox this process and its future children; False where the system has no Landlock.

    Everything may be read and run except beneath `hidden`; files may be written, created and
    removed only beneath `writable` and /dev. `readable` are single paths to keep readable
    although they lie beneath `hidden` (the kernel's own connection file).
    """
    abi = landlock_abi()
    libc = _libc()
    if abi < 1 or libc is None:
        return False
    write = _WRITE_FILE | _WRITE_TREE | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    read = _READ_FILE | _READ_DIR
    attr = _RulesetAttr(write | read)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if ruleset < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"landlock_create_ruleset: {os.strerror(error)}")
    try:
        for path in readable_roots(hidden):
            _add(libc, ruleset, path, read)
        for path in [*writable, "/dev"]:
            _add(libc, ruleset, path, read | write)
        for path in readable:
            _add(libc, ruleset, path, _READ_FILE)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"landlock_restrict_self: {os.strerror(error)}")
    finally:
        os.close(ruleset)
    return True


def apply_from_env(readable: Sequence[str] = ()) -> bool:
    """Apply the policy in `ENV`, if any (called in the kernel process before the kernel starts)."""
    spec = os.environ.get(ENV)
    if not spec:
        return False
    rules = json.loads(spec)
    return restrict(rules["writable"], rules["hidden"], readable)
