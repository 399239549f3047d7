"""The file-system sandbox of the grader's kernels (Linux Landlock), in a subprocess of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from attn_course.grading.sandbox import landlock_abi, readable_roots

PROBE = textwrap.dedent(
    """
    import os, subprocess, sys
    from attn_course.grading.sandbox import restrict

    own, other, secret = sys.argv[1:4]
    assert restrict([own], [secret])

    def attempt(action):
        try:
            action()
            return "allowed"
        except OSError:
            return "denied"

    def write(path):
        with open(path, "w") as file:
            file.write("x")

    def read(path):
        with open(path) as file:
            file.read()

    results = {
        "write own": attempt(lambda: write(os.path.join(own, "new.txt"))),
        "write other": attempt(lambda: write(os.path.join(other, "new.txt"))),
        "overwrite other": attempt(lambda: write(os.path.join(other, "kept.txt"))),
        "delete other": attempt(lambda: os.remove(os.path.join(other, "kept.txt"))),
        "read other": attempt(lambda: read(os.path.join(other, "kept.txt"))),
        "read secret": attempt(lambda: read(os.path.join(secret, "answer.txt"))),
        "read secret through /proc": attempt(lambda: read("/proc/self/root" + secret + "/answer.txt")),
        "list secret": attempt(lambda: os.listdir(secret)),
        "write /dev/null": attempt(lambda: write(os.devnull)),
        "a child writes other": "allowed" if subprocess.run(
            ["sh", "-c", f"echo x > {other}/child.txt"], stderr=subprocess.DEVNULL
        ).returncode == 0 else "denied",
    }
    print(results)
    """
)
EXPECTED = {
    "write own": "allowed",
    "write other": "denied",
    "overwrite other": "denied",
    "delete other": "denied",
    "read other": "allowed",
    "read secret": "denied",
    "read secret through /proc": "denied",
    "list secret": "denied",
    "write /dev/null": "allowed",
    "a child writes other": "denied",
}


@pytest.mark.skipif(landlock_abi() == 0, reason="no Landlock here: kernels run unsandboxed")
def test_a_sandboxed_process_writes_only_its_own_tree_and_cannot_read_hidden_ones(tmp_path):
    own, other, secret = (tmp_path / name for name in ("own", "other", "secret"))
    for folder in (own, other, secret):
        folder.mkdir()
    (other / "kept.txt").write_text("classmate")
    (secret / "answer.txt").write_text("42")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(own), str(other), str(secret)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert eval(run.stdout) == EXPECTED
    assert (other / "kept.txt").read_text() == "classmate" and not (other / "new.txt").exists()


def test_readable_roots_cover_everything_but_the_hidden_trees(tmp_path):
    hidden = tmp_path / "a" / "hidden"
    (hidden / "deep").mkdir(parents=True)
    (tmp_path / "a" / "sibling").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "shortcut").symlink_to(hidden)  # a rule would follow it into the hidden tree
    (tmp_path / "a" / "elsewhere").symlink_to(tmp_path / "b")
    roots = readable_roots([str(hidden)])
    assert str(tmp_path / "a" / "shortcut") not in roots and str(tmp_path / "a" / "elsewhere") in roots
    assert str(tmp_path / "a" / "sibling") in roots and str(tmp_path / "b") in roots
    assert not any(r == str(hidden) or r.startswith(str(hidden) + "/") for r in roots)
    assert not any(str(tmp_path).startswith(r + "/") or r == str(tmp_path) for r in roots)  # only partly
    assert "/usr" in roots or "/usr" in {r.rsplit("/", 1)[0] for r in roots}
