// Böhm, Noll, Plant & Zherdin's non-indexed nested-loop join (NLJ) on the GPU, exact.
//
// One thread per query row of A; a block stages tiles of `tile_rows` rows of B in shared memory and
// every thread of the block decides its query against each staged row (float64, dimensions summed in
// order: exact.cuh).  Rows too wide for shared memory (staged = 0) are read from global memory instead.  A self-join starts at the block's first query and keeps rows after the query, so
// each pair is decided once.  mode 0 counts each query's pairs; mode 1 writes them from
// offsets[query - q0], in row order of B.  Compiles under nvcc and NVRTC: extern "C", no host headers.

#include "exact.cuh"

extern "C" __global__ void nlj_join(const double* __restrict__ a, i64 q0, i64 q1, const double* __restrict__ b,
                                    i64 m, int d, int tile_rows, int staged, int selfjoin, double eps2, int mode,
                                    int* __restrict__ counts, const i64* __restrict__ offsets,
                                    i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od) {
    extern __shared__ double tile[];
    const i64 first_query = q0 + (i64)blockIdx.x * blockDim.x;
    const i64 qi = first_query + threadIdx.x;
    const bool active = qi < q1;
    i64 at = (mode == 1 && active) ? offsets[qi - q0] : 0;
    int found = 0;
    for (i64 t0 = selfjoin ? first_query + 1 : 0; t0 < m; t0 += tile_rows) {
        const int rows = (int)(m - t0 < tile_rows ? m - t0 : tile_rows);
        if (staged) {
            __syncthreads();  // the previous tile is no longer read
            for (i64 k = threadIdx.x; k < (i64)rows * d; k += blockDim.x) tile[k] = b[t0 * d + k];
            __syncthreads();
        }
        const double* rows_at = staged ? tile : b + t0 * d;
        if (!active) continue;
        for (int r = 0; r < rows; ++r) {
            const i64 j = t0 + r;
            if (selfjoin && j <= qi) continue;
            const double s = exact_within(a + qi * d, rows_at + (i64)r * d, d, eps2);
            if (s >= 0.0) {
                if (mode == 1) {
                    oi[at] = qi;
                    oj[at] = j;
                    od[at] = (float)sqrt(s);
                    ++at;
                }
                ++found;
            }
        }
    }
    if (active) counts[qi - q0] = found;  // int: a query has at most m < 2^31 partners in one partition
}
