// Brute-force ε-join on the GPU: the matrix units' product as a filter, float64 as the judge.
//
// Rows are sorted for locality and cut into tiles of T rows; the driver keeps the
// pairs of tiles whose bounding boxes are within eps and computes, for a batch of
// them, G[b] = X[P[b]] · Y[Q[b]]^T in float32 (batched cuBLAS, TF32 off) on rows
// shifted to the centre of their box.  For each element this kernel forms
//     s = |x|^2 + |y|^2 - 2 G            (float32)
// and keeps the pair as a candidate when s <= T(x, y), a threshold that exceeds
// eps^2 by a proven bound on the float32 error (see brute_gpu.py).  Every candidate
// is decided exactly, in float64 from the stored values with dimensions summed in
// order (__dadd_rn/__dmul_rn: no FMA contraction), so no pair is lost or gained.
// Accepted pairs are appended through an atomic counter; the driver re-runs a batch
// whose output overflowed and sorts each batch's pairs, so the order is deterministic.
// With per_pair set, pair_counts[b] also counts tile pair b's accepted pairs (written or
// not), from which the driver cuts batches of at most max_pairs pairs.

#include "exact.cuh"

extern "C" __global__ void brute_filter(
    const float* __restrict__ G, const i64* __restrict__ P, const i64* __restrict__ Q, int tile,
    i64 n, i64 m, const float* __restrict__ na, const float* __restrict__ nb,
    const double* __restrict__ ra, const double* __restrict__ rb,
    const double* __restrict__ A, const double* __restrict__ B,
    const i64* __restrict__ perm_a, const i64* __restrict__ perm_b, int d,
    double eps_hi, double eps2, double conv, double gamma2, int selfjoin,
    unsigned long long* __restrict__ counter, unsigned long long* __restrict__ pair_counts, int per_pair,
    i64 capacity,
    i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od) {
    const i64 pair = blockIdx.z;
    const i64 tp = P[pair], tq = Q[pair];
    for (int r = blockIdx.y; r < tile; r += gridDim.y) {
        const i64 a = tp * tile + r;
        if (a >= n) break;
        const float nar = na[a];
        const double rar = ra[a];
        const int first = (selfjoin && tp == tq) ? r + 1 : 0;
        for (int c = first + blockIdx.x * blockDim.x + threadIdx.x; c < tile; c += gridDim.x * blockDim.x) {
            const i64 b = tq * tile + c;
            if (b >= m) break;
            const float s = nar + nb[b] - 2.0f * G[(pair * tile + r) * (i64)tile + c];
            const double norms = rar + rb[b];
            const double reach = eps_hi + conv * norms;
            if ((double)s > reach * reach + gamma2 * norms * norms) continue;
            const double acc = exact_within(A + a * (i64)d, B + b * (i64)d, d, eps2);
            if (acc < 0.0) continue;
            i64 i = perm_a[a], j = perm_b[b];
            if (selfjoin && j < i) { i64 t = i; i = j; j = t; }
            const unsigned long long pos = claim_slot(counter, pair_counts + pair, per_pair);
            if ((i64)pos < capacity) {
                oi[pos] = i;
                oj[pos] = j;
                od[pos] = (float)sqrt(acc);
            }
        }
    }
}

// The gap between the boxes of tiles p0 + r and q, squared and summed in dimension order in float64, for
// r < rows, q < nq: out[r * nq + q].  Rounding is monotone, so it is at most the float64 value of any pair
// of rows inside the boxes (the kNN filter's pruning, kernels/knn_tc.py).
extern "C" __global__ void tile_box_d2(const double* __restrict__ alo, const double* __restrict__ ahi,
                                       const double* __restrict__ blo, const double* __restrict__ bhi, i64 p0,
                                       i64 rows, i64 nq, int d, double* __restrict__ out) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= rows * nq) return;
    const i64 p = p0 + k / nq, q = k % nq;
    double total = 0.0;
    for (int m = 0; m < d; ++m) {
        const double gap = fmax(fmax(__dsub_rn(blo[q * d + m], ahi[p * d + m]), __dsub_rn(alo[p * d + m], bhi[q * d + m])), 0.0);
        total = __dadd_rn(total, __dmul_rn(gap, gap));
    }
    out[k] = total;
}

// Which tile pairs (p0 + r, q), r < rows, q < nq, may hold a pair: near[r * nq + q] = 1 where the gap between
// their boxes, squared and summed in dimension order in float64, is at most eps2 (self-join: q >= p only).
// The sum only grows, so it stops once past eps2.  One thread per tile pair: the boxes of every tile of the
// GEMM-form filters in one launch, where an elementwise pass per dimension took 0.3 s at 7,800 tiles.
extern "C" __global__ void tile_box_near(const double* __restrict__ alo, const double* __restrict__ ahi,
                                         const double* __restrict__ blo, const double* __restrict__ bhi, i64 p0,
                                         i64 rows, i64 nq, int d, double eps2, int selfjoin,
                                         unsigned char* __restrict__ near) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= rows * nq) return;
    const i64 p = p0 + k / nq, q = k % nq;
    if (selfjoin && q < p) {
        near[k] = 0;
        return;
    }
    const double* al = alo + p * d;
    const double* ah = ahi + p * d;
    const double* bl = blo + q * d;
    const double* bh = bhi + q * d;
    double total = 0.0;
    for (int m = 0; m < d && total <= eps2; ++m) {
        const double gap = fmax(fmax(__dsub_rn(bl[m], ah[m]), __dsub_rn(al[m], bh[m])), 0.0);
        total = __dadd_rn(total, __dmul_rn(gap, gap));
    }
    near[k] = total <= eps2;
}
