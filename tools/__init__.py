"""Contributors' tools that do not ship in the wheel: notebook timing, the GPU tier, grading benchmarks."""
