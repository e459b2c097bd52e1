"""Benchmarks, run by hand: see benchmarks/README.md."""
