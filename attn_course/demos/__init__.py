"""The notebooks' demonstrations and measurements: example data, experiments and benchmarks they run."""
