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

// The gap between two boxes, squared and summed in dimension order in float64 (monotone rounding, so at most
// the float64 value of any pair of rows inside them; and no less for boxes inside these).  With a finite
// ``stop`` the sum ends once past it: the answer to "within stop?" is the same.  Dimension m of A's box at al[m sa]
// (of B's at bl[m sb]): boxes stored one tile a row (strides 1), or one dimension a row (the tiles' count).
__device__ __forceinline__ double box_gap2(const double* __restrict__ al, const double* __restrict__ ah,
                                           const double* __restrict__ bl, const double* __restrict__ bh, int d,
                                           double stop, i64 sa = 1, i64 sb = 1) {
    double total = 0.0;
    for (int m = 0; m < d && total <= stop; ++m) {
        const double gap = fmax(fmax(__dsub_rn(bl[m * sb], ah[m * sa]), __dsub_rn(al[m * sa], bh[m * sb])), 0.0);
        total = __dadd_rn(total, __dmul_rn(gap, gap));
    }
    return total;
}

// The gap between the boxes of tiles p0 + r and q for r < rows, q < nq, squared (box_gap2): out[r * nq + q]
// (the kNN filter's pruning, kernels/knn_tc.py).
extern "C" __global__ void tile_box_d2(const double* __restrict__ alo, const double* __restrict__ ahi,
                                       const double* __restrict__ blo, const double* __restrict__ bhi, i64 p0,
                                       i64 rows, i64 nq, int d, double* __restrict__ out) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= rows * nq) return;
    const i64 p = p0 + k / nq, q = k % nq;
    out[k] = box_gap2(alo + p * d, ahi + p * d, blo + q * d, bhi + q * d, d, __longlong_as_double(0x7ff0000000000000LL));  // no early end
}

// Which tile pairs (p0 + r, q), r < rows, q < nq, may hold a pair: near[r * nq + q] = 1 where box_gap2 of their
// boxes is at most eps2 (self-join: q >= p only).  One thread per tile pair: the boxes of every tile of the
// GEMM-form filters in one launch, where an elementwise pass per dimension took 0.3 s at 7,800 tiles.  The boxes
// one dimension a row (alo[m * np + p] for A's np tiles; B's likewise, nq of them): a warp's threads, on
// consecutive tiles, then read each dimension from one or two sectors, where boxes one tile a row cost a sector a
// thread.
extern "C" __global__ void tile_box_near(const double* __restrict__ alo, const double* __restrict__ ahi,
                                         const double* __restrict__ blo, const double* __restrict__ bhi, i64 p0,
                                         i64 rows, i64 np, i64 nq, int d, double eps2, int selfjoin,
                                         unsigned char* __restrict__ near) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= rows * nq) return;
    const i64 p = p0 + k / nq, q = k % nq;
    near[k] = !(selfjoin && q < p) && box_gap2(alo + p, ahi + p, blo + q, bhi + q, d, eps2, np, nq) <= eps2;
}

// The same test for the g x g tile pairs inside each listed pair of groups (sp[s], sq[s]) of g tiles:
// near[(s * g + r) * g + c] = 1 for tiles p = sp[s] g + r < na, q = sq[s] g + c < nb (self-join: q >= p) whose
// boxes are within eps2.  A group's box holds its tiles' boxes, so a group pair that fails the test holds no
// tile pair that passes it (box_gap2 is monotone): testing the tiles of the listed groups alone keeps the
// same tile pairs as testing them all.  Boxes one dimension a row, as for tile_box_near (na and nb tiles): uniform
// 1M x 128, 30.5M tile pairs (H200, session 27): near_tile_pairs 27 ms with boxes one tile a row, 16 ms so.
extern "C" __global__ void tile_box_near_in(const double* __restrict__ alo, const double* __restrict__ ahi,
                                            const double* __restrict__ blo, const double* __restrict__ bhi,
                                            const i64* __restrict__ sp, const i64* __restrict__ sq, i64 ngroups,
                                            int g, i64 na, i64 nb, int d, double eps2, int selfjoin,
                                            unsigned char* __restrict__ near) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= ngroups * g * g) return;
    const i64 s = k / ((i64)g * g);
    const int rc = (int)(k - s * g * g);
    const i64 p = sp[s] * g + rc / g, q = sq[s] * g + rc % g;
    near[k] = p < na && q < nb && !(selfjoin && q < p) &&
              box_gap2(alo + p, ahi + p, blo + q, bhi + q, d, eps2, na, nb) <= eps2;
}
