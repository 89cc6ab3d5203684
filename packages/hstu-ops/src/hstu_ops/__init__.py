"""HSTU kernels."""
