"""Set-similarity join kernels (Bellas & Gounaris): exact integer decisions (``measures``),
prefix/length/positional filtering (``filtering``, Numba), duplicate-set groups (``groups``),
candidate verification on the CPU (``verify_cpu``) or GPU (``verify_gpu``, CuPy), and the
per-block driver that ties them together (``local``).
"""
