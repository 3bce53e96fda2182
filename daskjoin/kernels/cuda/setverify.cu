// Verification of set-join candidate chunks (Bellas & Gounaris' three alternatives).
//
// Layout (the paper's): probe ids `probes[g]`, candidate groups
// cands[offsets[g] .. offsets[g+1]); sets as ranks `tokens` delimited by
// `offsets`.  Every kernel writes overlaps[c] = |r ∩ s| when the pair reaches
// the threshold, else 0.  The threshold test mirrors daskjoin/kernels/sets/measures.py
// exactly (integer arithmetic; cosine through 128-bit products).
// Compiles under nvcc and NVRTC: extern "C", no host headers.

#define JACCARD 0
#define COSINE 1
#define DICE 2
#define OVERLAP 3

typedef long long i64;
typedef unsigned long long u64;

// a * b >= c * d for non-negative integers below 2**64, exactly (128-bit products).
__device__ __forceinline__ bool at_least(u64 a, u64 b, u64 c, u64 d) {
    u64 lh = __umul64hi(a, b), ll = a * b;
    u64 rh = __umul64hi(c, d), rl = c * d;
    return lh > rh || (lh == rh && ll >= rl);
}

// p/q is the threshold (cosine: the threshold squared), as parse_threshold stores it.
__device__ __forceinline__ bool meets(i64 o, i64 nr, i64 ns, int code, i64 p, i64 q) {
    if (o < 1 || nr < 1 || ns < 1) return false;
    if (code == JACCARD) return at_least((u64)o, (u64)q, (u64)p, (u64)(nr + ns - o));
    if (code == DICE) return at_least((u64)(2 * o), (u64)q, (u64)p, (u64)(nr + ns));
    if (code == OVERLAP) return o >= p;
    return at_least((u64)(o * o), (u64)q, (u64)p, (u64)(nr * ns));
}

__device__ i64 required_overlap(i64 nr, i64 ns, int code, i64 p, i64 q) {
    if (code == OVERLAP) return p;
    double t = __ddiv_rn((double)p, (double)q);
    double o_est;
    if (code == JACCARD) o_est = __ddiv_rn(__dmul_rn(t, (double)(nr + ns)), __dadd_rn(1.0, t));
    else if (code == DICE) o_est = __dmul_rn(__dmul_rn(t, (double)(nr + ns)), 0.5);
    else o_est = sqrt(__dmul_rn(__dmul_rn(t, (double)nr), (double)ns));
    i64 o = (i64)ceil(o_est);
    if (o < 1) o = 1;
    while (o > 1 && meets(o - 1, nr, ns, code, p, q)) --o;
    while (!meets(o, nr, ns, code, p, q)) ++o;
    return o;
}

// |a ∩ b|, or less once `need` cannot be reached any more.
__device__ i64 merge_count(const int* a, i64 na, const int* b, i64 nb, i64 need) {
    i64 i = 0, j = 0, o = 0;
    while (i < na && j < nb) {
        if (o + min(na - i, nb - j) < need) return o;
        int x = a[i], y = b[j];
        o += (x == y);
        i += (x <= y);
        j += (y <= x);
    }
    return o;
}

// One candidate; `last_size`/`need` memoise the required overlap (candidates come mostly in size order).
__device__ __forceinline__ void verify_one(const int* r_tok, i64 r_lo, i64 nr, const int* s_tok,
                                           const i64* s_off, int s, int code, i64 p, i64 q, int* out,
                                           i64& last_size, i64& need) {
    i64 s_lo = s_off[s], ns = s_off[s + 1] - s_lo;
    if (ns != last_size) {
        last_size = ns;
        need = required_overlap(nr, ns, code, p, q);
    }
    i64 o = merge_count(r_tok + r_lo, nr, s_tok + s_lo, ns, need);
    *out = (o >= need) ? (int)o : 0;
}

// Alternative A: one thread per probe set, all its candidates in turn.
extern "C" __global__ void verify_thread(const int* r_tok, const i64* r_off, const int* s_tok, const i64* s_off,
                                         const int* probes, const i64* offsets, const int* cands, i64 n_probes,
                                         int code, i64 p, i64 q, int* overlaps) {
    i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_probes) return;
    int r = probes[g];
    i64 r_lo = r_off[r], nr = r_off[r + 1] - r_lo;
    i64 last_size = -1, need = 0;
    for (i64 c = offsets[g]; c < offsets[g + 1]; ++c)
        verify_one(r_tok, r_lo, nr, s_tok, s_off, cands[c], code, p, q, overlaps + c, last_size, need);
}

// Alternative B: one block per probe set, its threads share out the candidates.
extern "C" __global__ void verify_block(const int* r_tok, const i64* r_off, const int* s_tok, const i64* s_off,
                                        const int* probes, const i64* offsets, const int* cands, i64 n_probes,
                                        int code, i64 p, i64 q, int* overlaps) {
    i64 g = blockIdx.x;
    int r = probes[g];
    i64 r_lo = r_off[r], nr = r_off[r + 1] - r_lo;
    i64 last_size = -1, need = 0;
    for (i64 c = offsets[g] + threadIdx.x; c < offsets[g + 1]; c += blockDim.x)
        verify_one(r_tok, r_lo, nr, s_tok, s_off, cands[c], code, p, q, overlaps + c, last_size, need);
}

// How many of a's elements are among the first d of merge(a, b) (ties take a first).
__device__ i64 merge_split(const int* a, i64 na, const int* b, i64 nb, i64 d) {
    i64 lo = max((i64)0, d - nb), hi = min(d, na);
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (a[mid] <= b[d - mid - 1]) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Alternative C: one block per probe set; for each candidate the block walks the
// intersect path together, each thread one stretch of merge steps, then a block sum.
extern "C" __global__ void verify_path(const int* r_tok, const i64* r_off, const int* s_tok, const i64* s_off,
                                       const int* probes, const i64* offsets, const int* cands, i64 n_probes,
                                       int code, i64 p, i64 q, int* overlaps) {
    __shared__ int warp_sum[32];
    i64 g = blockIdx.x;
    int r = probes[g];
    i64 r_lo = r_off[r], nr = r_off[r + 1] - r_lo;
    const int* a = r_tok + r_lo;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    for (i64 c = offsets[g]; c < offsets[g + 1]; ++c) {
        int s = cands[c];
        i64 s_lo = s_off[s], ns = s_off[s + 1] - s_lo;
        const int* b = s_tok + s_lo;
        i64 steps = nr + ns, per = (steps + blockDim.x - 1) / blockDim.x;
        i64 d0 = min((i64)threadIdx.x * per, steps), d1 = min(d0 + per, steps);
        i64 i = merge_split(a, nr, b, ns, d0), j = d0 - i;
        int found = 0;
        for (i64 d = d0; d < d1; ++d) {
            if (i < nr && (j >= ns || a[i] <= b[j])) {
                found += (j < ns && a[i] == b[j]);
                ++i;
            } else {
                ++j;
            }
        }
        for (int shift = 16; shift > 0; shift >>= 1) found += __shfl_down_sync(0xffffffffu, found, shift);
        if (lane == 0) warp_sum[warp] = found;
        __syncthreads();
        if (threadIdx.x == 0) {
            i64 o = 0;
            for (int w = 0; w < n_warps; ++w) o += warp_sum[w];
            overlaps[c] = meets(o, nr, ns, code, p, q) ? (int)o : 0;
        }
        __syncthreads();
    }
}

// Stream compaction of one verified chunk, so only matches cross the bus:
// `rank` is the inclusive prefix count of non-zero overlaps; match k (in
// candidate order) goes to hits[k] (its candidate slot) and hit_overlaps[k].
extern "C" __global__ void compact_matches(const int* __restrict__ overlaps, const int* __restrict__ rank, i64 n,
                                           int* __restrict__ hits, int* __restrict__ hit_overlaps) {
    for (i64 c = blockIdx.x * (i64)blockDim.x + threadIdx.x; c < n; c += (i64)gridDim.x * blockDim.x) {
        int o = overlaps[c];
        if (o) {
            int k = rank[c] - 1;
            hits[k] = (int)c;
            hit_overlaps[k] = o;
        }
    }
}
