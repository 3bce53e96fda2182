// Böhm, Noll, Plant & Zherdin's index-supported nested-loop join on the GPU (kernels/directory.py states the
// method; kernels/directory_index.py the directory and why its pruning drops no pair), exact.
//
// One block (thread group) per query group of `group` consecutive queries in directory order.  The block
// walks the directory depth first (every thread the same walk: the test is on the group's box, so the
// control flow stays uniform and __syncthreads is safe), and at each reached leaf stages the leaf's rows
// in shared memory tile by tile; each thread decides its query against them, after skipping a leaf out
// of its own query's reach.  A self-join keeps rows after the query in directory order.
// mode 0 counts each query's pairs; mode 1 writes them from offsets[query - first query of the launch].
// Compiles under nvcc and NVRTC: extern "C", no host headers.

#include "exact.cuh"

#define MAX_STACK 64

__device__ __forceinline__ double box_gap2(const double* __restrict__ alo, const double* __restrict__ ahi,
                                           const double* __restrict__ blo, const double* __restrict__ bhi,
                                           int d, double limit) {
    double s = 0.0;
    for (int t = 0; t < d; ++t) {
        double g = __dsub_rn(blo[t], ahi[t]);
        const double h = __dsub_rn(alo[t], bhi[t]);
        if (h > g) g = h;
        if (g > 0.0) {
            s = __dadd_rn(s, __dmul_rn(g, g));
            if (s > limit) return s;
        }
    }
    return s;
}

// The box of every leaf: one thread per (leaf, dimension), over the leaf's rows (an empty leaf keeps the
// +inf/-inf it was given).
extern "C" __global__ void leaf_boxes(const double* __restrict__ x, const i64* __restrict__ starts, i64 nleaves,
                                      int d, double* __restrict__ lo, double* __restrict__ hi) {
    const i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (k >= nleaves * d) return;
    const i64 leaf = k / d;
    const int t = (int)(k % d);
    const i64 s = starts[leaf], e = starts[leaf + 1];
    if (s >= e) return;
    double a = x[s * d + t], b = a;
    for (i64 r = s + 1; r < e; ++r) {
        const double v = x[r * d + t];
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    lo[k] = a;
    hi[k] = b;
}

extern "C" __global__ void directory_join(
    const double* __restrict__ q, const double* __restrict__ qb, const i64* __restrict__ qids, i64 m,
    const double* __restrict__ glo, const double* __restrict__ ghi, int group, i64 g0,
    const double* __restrict__ x, const i64* __restrict__ xids, const i64* __restrict__ leaf_start,
    const double* __restrict__ nlo, const double* __restrict__ nhi, const i64* __restrict__ level_at,
    int levels, int fanout, int d, int tile_rows, int staged, int selfjoin, double eps2, double limit, int mode,
    int* __restrict__ counts, const i64* __restrict__ offsets, i64* __restrict__ oi, i64* __restrict__ oj,
    float* __restrict__ od) {
    extern __shared__ double tile[];
    const i64 g = g0 + blockIdx.x;
    const i64 u0 = g * group;  // the group's first query
    const i64 u = u0 + threadIdx.x;
    const bool active = threadIdx.x < group && u < m;
    const i64 first_out = g0 * group;
    i64 at = (mode == 1 && active) ? offsets[u - first_out] : 0;
    int found = 0;
    int stack[MAX_STACK];  // node * 8 + level (levels <= 8): the walk's pending nodes
    int top = 0;
    for (int c = fanout - 1; c >= 0; --c) stack[top++] = c * 8;
    const double* my_lo = glo + g * d;
    const double* my_hi = ghi + g * d;
    const i64 last_level = level_at[levels - 1];
    while (top > 0) {
        --top;
        const int node = stack[top] >> 3, level = stack[top] & 7;
        const i64 at_node = level_at[level] + node;
        if (box_gap2(my_lo, my_hi, nlo + at_node * d, nhi + at_node * d, d, limit) > limit) continue;
        if (level < levels - 1) {
            for (int c = fanout - 1; c >= 0; --c) stack[top++] = (node * fanout + c) * 8 + level + 1;
            continue;
        }
        i64 s = leaf_start[node];
        const i64 e = leaf_start[node + 1];
        if (selfjoin && s < u0 + 1) s = u0 + 1;
        if (s >= e) continue;
        const double* leaf_lo = nlo + (last_level + node) * d;
        const double* leaf_hi = nhi + (last_level + node) * d;
        bool reach = active;
        if (reach) reach = box_gap2(qb + u * d, qb + u * d, leaf_lo, leaf_hi, d, limit) <= limit;
        for (i64 t0 = s; t0 < e; t0 += tile_rows) {
            const int rows = (int)(e - t0 < tile_rows ? e - t0 : tile_rows);
            if (staged) {  // rows wider than shared memory are read from global memory instead
                __syncthreads();
                for (i64 k = threadIdx.x; k < (i64)rows * d; k += blockDim.x) tile[k] = x[t0 * d + k];
                __syncthreads();
            }
            if (!reach) continue;
            const double* rows_at = staged ? tile : x + t0 * d;
            for (int r = 0; r < rows; ++r) {
                const i64 v = t0 + r;
                if (selfjoin && v <= u) continue;
                const double s2 = exact_within(q + u * d, rows_at + (i64)r * d, d, eps2);
                if (s2 >= 0.0) {
                    if (mode == 1) {
                        i64 a = qids[u], b = xids[v];
                        if (selfjoin && b < a) { const i64 t = a; a = b; b = t; }
                        oi[at] = a;
                        oj[at] = b;
                        od[at] = (float)sqrt(s2);
                        ++at;
                    }
                    ++found;
                }
            }
        }
    }
    if (active) counts[u - first_out] = found;  // int: a query has at most m < 2^31 partners in one partition
}
