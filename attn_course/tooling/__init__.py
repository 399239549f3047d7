"""Course tooling the CLI runs: the repository's coordinates, the release of student notebooks, workspaces."""
