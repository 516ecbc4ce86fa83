"""Helpers shared by several test modules and benchmarks (no tests here: test modules import from this package,
never from each other)."""
