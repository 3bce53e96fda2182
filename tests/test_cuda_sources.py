"""The CUDA sources compile for Hopper with nvcc, without register spills (skipped where nvcc is absent).

Catches syntax errors and resource regressions before any GPU time is spent:
no kernel may spill registers or use a stack frame (local memory), except those in ``STACK_ALLOWED``.
"""
import os
import re
import shutil
import subprocess

import pytest

CUDA_DIR = os.path.join(os.path.dirname(__file__), "..", "daskjoin", "kernels", "cuda")
SOURCES = sorted(f for f in os.listdir(CUDA_DIR) if f.endswith(".cu"))

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


#: kernels allowed a stack frame, and why (never spills)
STACK_ALLOWED = {
    # per-query cell coordinates and ring bounds (arrays of up to 3 indices, indexed at run time) live in
    # local memory, L1-resident; the search is 15 ms of the 0.6 s a 2M x 3-d kNN-join takes on an H100
    # (benchmarks/profile_knn_gpu.py), so registers would not be worth a kernel per dimensionality
    "knn_grid": 512,
    # the directory walk's pending nodes (at most levels x fanout < 64 ints), the same for every thread of a
    # block (the walk tests the group's box), so its loads are uniform and L1-resident
    "directory_join": 256,
}


#: every source for sm_90, and those with code for an architecture-specific target (wgmma) for sm_90a too
def _has_specific_code(source: str) -> bool:
    with open(os.path.join(CUDA_DIR, source)) as f:
        return "__CUDA_ARCH_FEAT_SM90_ALL" in f.read()


TARGETS = [(s, "sm_90") for s in SOURCES] + [(s, "sm_90a") for s in SOURCES if _has_specific_code(s)]


@pytest.mark.parametrize("source, arch", TARGETS)
def test_compiles_without_spills(source, arch, tmp_path):
    proc = subprocess.run(
        ["nvcc", "-std=c++17", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"),
         os.path.join(CUDA_DIR, source)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr
    kernels = re.findall(r"Function properties for (\w+)\n\s+(\d+) bytes stack frame, (\d+) bytes spill stores, "
                         r"(\d+) bytes spill loads", report)
    assert kernels, report
    # ptxas serialises a kernel's wgmma where it cannot prove the accumulators untouched while products run
    # (message C7514, "wgmma.mma_async instructions are serialized due to ...")
    assert "instructions are serialized" not in report, f"{source} ({arch}): wgmma serialised:\n{report}"
    for name, stack, spill_st, spill_ld in kernels:
        assert int(spill_st) == 0 and int(spill_ld) == 0, f"{name} spills registers:\n{report}"
        allowed = STACK_ALLOWED.get(name, 0)
        assert int(stack) <= allowed, f"{name} uses {stack} bytes of stack (local memory):\n{report}"


def test_sources_are_nvrtc_friendly():
    """extern "C" entry points and no host headers, so CuPy's RawModule (NVRTC) compiles them too: the only
    includes are of files in cuda/, which the loader splices in (NVRTC gets one string)."""
    from daskjoin.kernels.gpu_common import cuda_source

    for source in SOURCES:
        text = open(os.path.join(CUDA_DIR, source)).read()
        assert 'extern "C" __global__' in text, source
        for line in text.splitlines():
            if line.startswith("#include"):
                name = line.split('"')[1] if line.count('"') == 2 else line
                assert os.path.exists(os.path.join(CUDA_DIR, name)), f"{source}: {line} is not a file of cuda/"
        spliced = cuda_source(source)
        directives = [line for line in spliced.splitlines() if line.startswith(("#include", "#pragma once"))]
        assert not directives, (source, directives)
