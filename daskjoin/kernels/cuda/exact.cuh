// The exact decision and the output slots that the brute-force kernels share (#included; the loader
// in kernels/gpu_common.py splices it in for NVRTC).
#pragma once

typedef long long i64;

// 16 bytes of T as one load: lanes of a warp read 32 different rows, so every load instruction costs a
// pass of the L1 per row whatever its width; vector loads take a group in 4 instructions where scalar
// ones took 16 (float) or 8 (double).  Generic loads, not __ldg: some callers' rows are in shared memory.
__device__ __forceinline__ void load16(float* out, const float* p) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
}
__device__ __forceinline__ void load16(double* out, const double* p) {
    const double2 v = *reinterpret_cast<const double2*>(p);
    out[0] = v.x; out[1] = v.y;
}

// Float64 squared distance of rows p, q (stored as T) if it is <= eps2, else -1: dimensions summed in
// order with no FMA (the exact rule, kernels/exact.py).  Loads are issued a group at a time (64 bytes of
// each row) before their use, so a candidate costs d / group memory latencies, not d; the early exit after
// each group leaves the decision unchanged (adding non-negative terms never lowers a float sum).  Rows at
// 16-byte aligned addresses (d * sizeof(T) a multiple of 16) are read by 16-byte loads: the same values,
// summed in the same order.
template <typename T>
__device__ __forceinline__ double exact_within(const T* __restrict__ p, const T* __restrict__ q, int d, double eps2) {
    constexpr int G = 64 / sizeof(T), V = 16 / sizeof(T);
    const bool wide = ((reinterpret_cast<unsigned long long>(p) | reinterpret_cast<unsigned long long>(q)) & 15) == 0;
    double s = 0.0;
    int k = 0;
    for (; k + G <= d; k += G) {
        T pv[G], qv[G];
        if (wide) {
#pragma unroll
            for (int t = 0; t < G; t += V) { load16(pv + t, p + k + t); load16(qv + t, q + k + t); }
        } else {
#pragma unroll
            for (int t = 0; t < G; ++t) { pv[t] = p[k + t]; qv[t] = q[k + t]; }
        }
#pragma unroll
        for (int t = 0; t < G; ++t) {
            const double u = __dsub_rn((double)pv[t], (double)qv[t]);
            s = __dadd_rn(s, __dmul_rn(u, u));
        }
        if (s > eps2) return -1.0;
    }
    for (; k < d; ++k) {
        const double u = __dsub_rn((double)p[k], (double)q[k]);
        s = __dadd_rn(s, __dmul_rn(u, u));
    }
    return s <= eps2 ? s : -1.0;
}

// One output slot per calling lane, the lanes that arrive together sharing one atomicAdd (and one on
// the tile pair's count): same-address atomics from every accepted pair would serialise.
__device__ __forceinline__ unsigned long long claim_slot(unsigned long long* counter, unsigned long long* pair_count,
                                                         int per_pair) {
    const unsigned mask = __activemask();
    const int lane = threadIdx.x & 31, leader = __ffs(mask) - 1;
    const unsigned below = mask & ((1u << lane) - 1u);
    unsigned long long base = 0ULL;
    if (lane == leader) {
        base = atomicAdd(counter, (unsigned long long)__popc(mask));
        if (per_pair) atomicAdd(pair_count, (unsigned long long)__popc(mask));
    }
    base = __shfl_sync(mask, base, leader);
    return base + __popc(below);
}

