// The greedy chain of pivots behind the GPU brute force's locality order (brute_gpu.pivot_order), on the device:
// from pivot 0, each next pivot is the nearest one not yet visited, chosen as numpy's argmin of the current row
// with the visited columns at +inf picks (the first NaN if the row has one, else the first smallest value), so the
// chain is pivot_chain.greedy_chain's, tie for tie.  One block walks the m steps; each step its threads take the
// smallest of their columns and the block reduces those (warp shuffles, then one warp over the warps' results).
// On the host the chain cost the distances' transfer (64 MB at 4,096 pivots) and a compiled loop, ~60 ms a
// tensor-core driver on 1M rows (H200, session 25); here a few milliseconds.
// Also each row's pick of its nearest pivot (row_argmax, numpy's argmax of a matrix's rows).

#define CHAIN_THREADS 1024

typedef long long i64;

// (class, key, column): class 0 a NaN (first wins), 1 a number or +inf; the lexicographic smallest is argmin's pick
struct Pick {
    int cls;
    int key;
    int j;
};

// A float's order as an int (-0 as +0): compared exactly, subnormals included (the module compiles with
// -ftz=true, under which float comparisons take subnormals for zeros and numpy does not)
__device__ __forceinline__ int order_key(float f) {
    int b = __float_as_int(f);
    if (b == (int)0x80000000) b = 0;
    return b >= 0 ? b : b ^ 0x7fffffff;
}

__device__ __forceinline__ bool before(const Pick& a, const Pick& b) {
    if (a.cls != b.cls) return a.cls < b.cls;
    if (a.cls == 1 && a.key != b.key) return a.key < b.key;
    return a.j < b.j;
}

__device__ __forceinline__ Pick shfl_down(const Pick& p, int off) {
    return Pick{__shfl_down_sync(0xffffffffu, p.cls, off), __shfl_down_sync(0xffffffffu, p.key, off),
                __shfl_down_sync(0xffffffffu, p.j, off)};
}

// dist: m x m, row-major, float32; chain: m entries; rank (m entries, set to m by the caller): each pivot's last
// place in the chain.  Launched as one block of CHAIN_THREADS threads with m bytes of dynamic shared memory (the
// visited flags).
extern "C" __global__ void __launch_bounds__(CHAIN_THREADS) greedy_chain(const float* __restrict__ dist, int m,
                                                                        i64* __restrict__ chain, i64* __restrict__ rank) {
    extern __shared__ unsigned char visited[];
    __shared__ Pick warp_best[CHAIN_THREADS / 32];
    __shared__ int next;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int j = threadIdx.x; j < m; j += blockDim.x) visited[j] = 0;
    __syncthreads();
    int current = 0;
    for (int t = 0; t < m; ++t) {
        if (threadIdx.x == 0) {
            chain[t] = current;
            rank[current] = t;
            visited[current] = 1;
        }
        __syncthreads();
        if (t + 1 == m) break;
        const float* row = dist + (i64)current * m;
        Pick best{2, 0, m};  // worse than any column
        for (int j = threadIdx.x; j < m; j += blockDim.x) {
            const float d = row[j];
            const Pick p = visited[j] ? Pick{1, 0x7f800000, j} : (isnan(d) ? Pick{0, 0, j} : Pick{1, order_key(d), j});
            if (before(p, best)) best = p;
        }
        for (int off = 16; off > 0; off >>= 1) {
            const Pick o = shfl_down(best, off);
            if (before(o, best)) best = o;
        }
        if (lane == 0) warp_best[warp] = best;
        __syncthreads();
        if (warp == 0) {
            best = lane < (int)(blockDim.x >> 5) ? warp_best[lane] : Pick{2, 0, m};
            for (int off = 16; off > 0; off >>= 1) {
                const Pick o = shfl_down(best, off);
                if (before(o, best)) best = o;
            }
            if (lane == 0) next = best.j;
        }
        __syncthreads();
        current = next;
    }
}

// Each row's argmax as numpy takes it (the first NaN if the row has one, else the first largest value; floats
// ordered exactly as above) of the n x m row-major matrix `a`, into out: one warp a row, its lanes reading columns
// lane, lane + 32, ... (coalesced), then a shuffle reduction.  CuPy's argmax over the rows of the 65,536 x 4,096
// products of brute_gpu.pivot_order took most of that step (H200, session 27: the step 46 ms for 1M rows).
extern "C" __global__ void row_argmax(const float* __restrict__ a, i64 n, int m, i64* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 r = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
    if (r >= n) return;  // (a whole warp: rows are warp-uniform)
    const float* row = a + r * m;
    Pick best{2, 0, m};  // worse than any column
#pragma unroll 8
    for (int j = lane; j < m; j += 32) {
        const float v = row[j];
        // the largest first: the negated order (a number's order lies within +-2,139,095,041: no overflow)
        const Pick p = isnan(v) ? Pick{0, 0, j} : Pick{1, -order_key(v), j};
        if (before(p, best)) best = p;
    }
    for (int off = 16; off > 0; off >>= 1) {
        const Pick o = shfl_down(best, off);
        if (before(o, best)) best = o;
    }
    if (lane == 0) out[r] = best.j;
}
