"""Benchmarks (pytest-benchmark); run with `make bench`."""
