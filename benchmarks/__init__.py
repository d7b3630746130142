"""Benchmarks for streamguard: paper figure reproductions and core kernel timings (see README.md)."""
