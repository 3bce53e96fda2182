"""Which form of the tensor-core filter runs where, checked on any machine with a stand-in for CuPy.

The wgmma form only on a Hopper device (compute capability 9.0) whose sm_90a compile succeeded; mma.sync on
other devices (an A100, Blackwell) and where that compile fails (a warning, the portable module); each form's
launch shared memory and kernel names.  The kernels themselves run in tests/test_brute_tc_gpu.py (marked gpu).
"""
from __future__ import annotations

import types

import pytest

from daskjoin.kernels import brute_gpu, gpu_common


class _Kernel:
    def __init__(self, name):
        self.name = name
        self.max_dynamic_shared_size_bytes = 0


class _Module:
    def __init__(self, **how):
        self.how = how

    def get_function(self, name):
        return _Kernel(name)


def _fake_cupy(cc: str):
    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0),
                                 Device=lambda device: types.SimpleNamespace(compute_capability=cc))
    return types.SimpleNamespace(cuda=cuda, RawModule=_Module)


@pytest.fixture
def device(monkeypatch):
    """``device(cc, compiles=True)``: CuPy replaced by a device of compute capability ``cc`` whose sm_90a compile
    succeeds or fails; the module caches emptied around the test."""
    def use(cc: str, compiles: bool = True):
        fake = _fake_cupy(cc)
        monkeypatch.setattr(gpu_common, "cupy", lambda: fake)
        monkeypatch.setattr(brute_gpu, "cupy", lambda: fake)
        monkeypatch.setattr(gpu_common, "cuda_source", lambda name: f"// {name}")

        def cubin(name, arch):
            if not compiles:
                raise RuntimeError(f"NVRTC could not compile cuda/{name} for {arch}")
            return f"/cache/{name}-{arch}.cubin"
        monkeypatch.setattr(gpu_common, "_specific_cubin", cubin)
        monkeypatch.setattr(gpu_common, "_SPECIFIC_FAILED", set())
        monkeypatch.setattr(brute_gpu, "TC_MMA", None)
        for cached in (gpu_common._module, gpu_common.feature_arch):
            cached.cache_clear()
    yield use
    for cached in (gpu_common._module, gpu_common.feature_arch):
        cached.cache_clear()


@pytest.mark.parametrize("cc", ["80", "86", "89", "100", "120"])
def test_other_gpus_take_mma_sync_from_the_portable_module(device, cc):
    device(cc)
    assert gpu_common.feature_arch(0) is None
    assert brute_gpu.tc_mma() == "mma"
    assert brute_gpu.tc_smem_bytes() == brute_gpu.TC_SMEM_BYTES
    k = brute_gpu.tc_kernel("brute_tc_i8")
    assert k.name == "brute_tc_i8" and k.max_dynamic_shared_size_bytes == brute_gpu.TC_SMEM_BYTES
    assert "code" in gpu_common._module("brute_tc.cu", 0, False).how
    with pytest.raises(ValueError, match="Hopper"):
        brute_gpu.tc_kernel("brute_tc_i8", "wgmma")


def test_hopper_takes_wgmma_from_the_sm90a_module(device):
    device("90")
    assert gpu_common.feature_arch(0) == "sm_90a"
    assert brute_gpu.tc_mma() == "wgmma"
    assert brute_gpu.tc_smem_bytes() == brute_gpu.TC_WG_SMEM_BYTES
    for fmt in ("i8", "f16"):
        k = brute_gpu.tc_kernel(f"brute_tc_{fmt}")
        assert k.name == f"brute_tc_wg_{fmt}" and k.max_dynamic_shared_size_bytes == brute_gpu.TC_WG_SMEM_BYTES
        assert brute_gpu.tc_kernel(f"tc_products_{fmt}").name == f"tc_products_wg_{fmt}"
        assert brute_gpu.tc_kernel(f"brute_tc_{fmt}", "mma").name == f"brute_tc_{fmt}"
    # the float64 decisions and the filter come from one module, compiled once for sm_90a
    assert gpu_common.kernel("brute_tc.cu", "brute_tc_exact_f32", specific=True).name == "brute_tc_exact_f32"
    assert gpu_common._module.cache_info().currsize == 1
    assert gpu_common._module("brute_tc.cu", 0, True).how == {"path": "/cache/brute_tc.cu-sm_90a.cubin"}
    with pytest.raises(ValueError, match="no wgmma form"):
        brute_gpu.tc_kernel("brute_tc_exact_f32", "wgmma")
    with pytest.raises(ValueError, match="mma must be one of"):
        brute_gpu.tc_kernel("brute_tc_i8", "tcgen05")


def test_hopper_whose_sm90a_compile_fails_takes_mma_sync_with_a_warning(device):
    device("90", compiles=False)
    with pytest.warns(RuntimeWarning, match="portable kernels"):
        assert brute_gpu.tc_mma() == "mma"
    assert "code" in gpu_common._module("brute_tc.cu", 0, True).how
    assert brute_gpu.tc_kernel("brute_tc_f16").name == "brute_tc_f16"
    with pytest.raises(ValueError, match="Hopper"):
        brute_gpu.tc_kernel("brute_tc_f16", "wgmma")


def test_a_form_asked_for_overrides_the_device_default(device, monkeypatch):
    device("90")
    monkeypatch.setattr(brute_gpu, "TC_MMA", "mma")
    assert brute_gpu.tc_mma() == "mma" and brute_gpu.tc_smem_bytes() == brute_gpu.TC_SMEM_BYTES
    assert brute_gpu.tc_kernel("brute_tc_i8").name == "brute_tc_i8"


class _FakeNvrtc:
    """NVRTC as _specific_cubin calls it: records compiles, returns the options as the 'cubin'."""

    class NVRTCError(Exception):
        pass

    def __init__(self, fail=False):
        self.fail, self.compiled = fail, []

    def getVersion(self):
        return (13, 0)

    def createProgram(self, source, name, headers, include_names):
        return [source, name]

    def compileProgram(self, prog, options):
        if self.fail:
            raise self.NVRTCError("NVRTC_ERROR_COMPILATION")
        self.compiled.append((prog[1], tuple(options)))
        prog.append(" ".join(options).encode())

    def getCUBIN(self, prog):
        return prog[-1]

    def getProgramLog(self, prog):
        return "brute_tc.cu(1): error: something"

    def destroyProgram(self, prog):
        pass


@pytest.fixture
def nvrtc(monkeypatch, tmp_path):
    """A stand-in ``cupy.cuda.nvrtc`` and a cache folder of the test's own."""
    import sys

    fake = _FakeNvrtc()
    cuda = types.ModuleType("cupy.cuda")
    cuda.nvrtc = fake
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    return fake


def test_the_sm90a_cubin_is_compiled_once_and_kept_under_its_key(nvrtc, tmp_path):
    path = gpu_common._specific_cubin("brute_tc.cu", "sm_90a")
    assert nvrtc.compiled == [("brute_tc.cu", ("-std=c++17", "-ftz=true", "-arch=sm_90a"))]  # CuPy's options
    assert open(path, "rb").read() == b"-std=c++17 -ftz=true -arch=sm_90a"
    assert gpu_common._specific_cubin("brute_tc.cu", "sm_90a") == path and len(nvrtc.compiled) == 1  # a hit
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.rsplit("/", 1)[1]]  # no temporary file left
    assert gpu_common._specific_cubin("knn.cu", "sm_90a") != path  # another source, another key


def test_a_failed_sm90a_compile_says_why_and_leaves_no_file(monkeypatch, nvrtc, tmp_path):
    nvrtc.fail = True
    with pytest.raises(RuntimeError, match="something"):
        gpu_common._specific_cubin("brute_tc.cu", "sm_90a")
    assert list(tmp_path.iterdir()) == []
