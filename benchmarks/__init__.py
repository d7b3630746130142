"""Benchmarks for streamguard: paper figure reproductions and core kernel timings (see benchmarks/README.md)."""
