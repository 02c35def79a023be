"""Benchmarks: python -m benchmarks.mlp, python -m benchmarks.gemm, python -m benchmarks.run_all."""
