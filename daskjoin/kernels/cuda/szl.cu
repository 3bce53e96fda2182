// LSS's ε-join over a Set of Z-Lists on the GPU (kernels/szl.py states the method and its proof).
//
// szl_keys:      the Morton key of every row (side 0) in every list.
// szl_intervals: per query slot, the shortest box interval over the lists (two binary searches a list).
// szl_walk:      per query slot (one thread), the exact decision of every row of its interval;
//                mode 0 counts, mode 1 writes the pairs from offsets[slot] and records the count.
//
// Keys and quantisation use __dsub_rn/__dmul_rn/__dadd_rn (no FMA contraction): one monotone function
// for rows and box corners.  Compiles under nvcc and NVRTC: extern "C", no host headers.

#include "exact.cuh"

typedef unsigned long long u64;

__device__ __forceinline__ i64 quant(double v, double lo, double scale, i64 top) {
    const double w = __dmul_rn(__dsub_rn(v, lo), scale);
    if (!(w > 0.0)) return 0;          // also NaN
    if (w >= (double)top) return top;
    return (i64)floor(w);
}

// Bit b of key dimension t goes to position b kd + (kd - 1 - t).
__device__ __forceinline__ u64 zkey(const double* __restrict__ row, const i64* __restrict__ dims, int kd,
                                    const double* __restrict__ lo, const double* __restrict__ scale, i64 top,
                                    const i64* __restrict__ shift, int bits, int side, double margin) {
    u64 key = 0ULL;
    for (int t = 0; t < kd; ++t) {
        double v = row[dims[t]];
        if (side != 0) {
            const double m = __dadd_rn(__dmul_rn(margin, 1.0 + 0x1p-50), __dmul_rn(fabs(v), 0x1p-50));
            v = side < 0 ? __dsub_rn(v, m) : __dadd_rn(v, m);
        }
        const u64 c = (u64)(quant(v, lo[t], scale[t], top) + shift[t]);
        for (int b = 0; b < bits; ++b) key |= ((c >> b) & 1ULL) << (b * kd + kd - 1 - t);
    }
    return key;
}

extern "C" __global__ void szl_keys(const double* __restrict__ x, i64 n, int d, const i64* __restrict__ dims,
                                    int kd, const double* __restrict__ lo, const double* __restrict__ scale,
                                    i64 top, const i64* __restrict__ shift, int lists, int bits,
                                    u64* __restrict__ keys) {
    for (i64 p = blockIdx.x * (i64)blockDim.x + threadIdx.x; p < n; p += (i64)gridDim.x * blockDim.x) {
        for (int l = 0; l < lists; ++l)
            keys[l * n + p] = zkey(x + p * d, dims, kd, lo, scale, top, shift + l * kd, bits, 0, 0.0);
    }
}

__device__ __forceinline__ i64 lower(const u64* __restrict__ keys, i64 n, u64 key) {
    i64 lo = 0, hi = n;
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if (keys[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

__device__ __forceinline__ i64 upper(const u64* __restrict__ keys, i64 n, u64 key) {
    i64 lo = 0, hi = n;
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if (keys[mid] <= key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

extern "C" __global__ void szl_intervals(const double* __restrict__ q, i64 m, int d, const i64* __restrict__ dims,
                                         int kd, const double* __restrict__ lo, const double* __restrict__ scale,
                                         i64 top, const i64* __restrict__ shift, int lists, int bits, double margin,
                                         const u64* __restrict__ skeys, i64 n, signed char* __restrict__ choice,
                                         i64* __restrict__ first, i64* __restrict__ last) {
    for (i64 t = blockIdx.x * (i64)blockDim.x + threadIdx.x; t < m; t += (i64)gridDim.x * blockDim.x) {
        int best = 0;
        i64 f_best = 0, e_best = n + 1;
        for (int l = 0; l < lists; ++l) {
            const u64 klo = zkey(q + t * d, dims, kd, lo, scale, top, shift + l * kd, bits, -1, margin);
            const u64 khi = zkey(q + t * d, dims, kd, lo, scale, top, shift + l * kd, bits, 1, margin);
            const i64 f = lower(skeys + l * n, n, klo);
            const i64 e = upper(skeys + l * n, n, khi);
            if (e - f < e_best - f_best) { best = l; f_best = f; e_best = e; }
        }
        choice[t] = (signed char)best;
        first[t] = f_best;
        last[t] = e_best;
    }
}

// rows: the index rows in every list's order (copied != 0), or once in their own order.  Self-join: the
// query at slot t is the row at position own[l * m + t] of list l; it reports the row at position e
// unless that row walks an earlier list, or the same list from before it (kernels/szl.py).
extern "C" __global__ void szl_walk(const double* __restrict__ q, const i64* __restrict__ qrows, i64 m0, i64 m1,
                                    const double* __restrict__ rows, int copied, i64 n, int d,
                                    const i64* __restrict__ perm, const signed char* __restrict__ picked,
                                    const signed char* __restrict__ choice, const i64* __restrict__ first,
                                    const i64* __restrict__ last, const i64* __restrict__ own, i64 m,
                                    int selfjoin, int swap, double eps2, int mode, int* __restrict__ counts,
                                    const i64* __restrict__ offsets, i64* __restrict__ oi, i64* __restrict__ oj,
                                    float* __restrict__ od) {
    for (i64 t = m0 + blockIdx.x * (i64)blockDim.x + threadIdx.x; t < m1; t += (i64)gridDim.x * blockDim.x) {
        const int l = choice[t];
        const i64 pos = selfjoin ? own[l * m + t] : -1;
        const i64 qrow = qrows[t];
        const double* qp = q + t * d;
        const double* data = copied ? rows + l * n * d : rows;
        const i64* lperm = perm + l * n;
        const signed char* lpicked = picked + l * n;
        i64 at = mode == 1 ? offsets[t - m0] : 0;
        int found = 0;
        for (i64 e = first[t]; e < last[t]; ++e) {
            if (selfjoin) {
                if (e == pos) continue;
                const int other = lpicked[e];
                if (other < l || (e < pos && other == l)) continue;
            }
            const i64 y = lperm[e];
            const double s = exact_within(qp, data + (copied ? e : y) * d, d, eps2);
            if (s >= 0.0) {
                if (mode == 1) {
                    i64 i = qrow, j = y;
                    if (selfjoin) { i = qrow < y ? qrow : y; j = qrow < y ? y : qrow; }
                    else if (swap) { i = y; j = qrow; }
                    oi[at] = i;
                    oj[at] = j;
                    od[at] = (float)sqrt(s);
                    ++at;
                }
                ++found;
            }
        }
        counts[t - m0] = found;
    }
}
