"""The fault scenarios of tests/faults/ (one module a suite, `common` for what they share): each injects a fault
into a copy of the tiny project, recovers the way a user would and returns a `Row` of facts. The test modules
assert on them; benchmarks/faults.py prints them as one table."""
