// Brute-force ε-join on the tensor cores: integer tiles as the filter, float64 as the judge.
//
// Each block takes PAIRS_PER_BLOCK consecutive pairs of 128-row tiles (P[k], Q[k]), one after another, of rows
// quantised to small integers
// (kernels/tc_quant.py): int8 (mma m16n8k32, s32 accumulation) or integers |q| <= 2048 stored as
// fp16 (mma m16n8k16, f32 accumulation, every partial sum an integer below 2^24).  Either way
// the product G = q_a . q_b is exact, so |q_a - q_b|^2 = |q_a|^2 + |q_b|^2 - 2 G exactly, and a
// true pair satisfies
//     |q_a - q_b| <= reach0 + u_a + u_b,  hence  G >= X_a + Y_b
// (reach0 >= eps_hi / S, u >= the row's quantisation residual in units of S, X and Y per-row and
// per-column thresholds; proof in tc_quant.py and docs/exactness.md).  Pairs that pass are listed as candidates and decided
// exactly by a second kernel, in float64 from the stored values with dimensions summed in order
// (exact.cuh), as in brute.cu; accepted pairs are appended through an atomic counter, the driver
// sorts them.
//
// Layout: rows are `rowbytes` bytes (a multiple of 32, zero padded); 8 warps, each computing a
// 32 x 64 block of the 128 x 128 tile from shared memory staged 128 bytes of every row at a
// time, rows padded to 144 bytes so that the fragment loads hit 32 distinct banks.  The fp16 and
// int8 instructions read the same bytes of A, B and write the same accumulator layout (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 / m16n8k32"), so one body serves both.

#include "exact.cuh"

typedef unsigned int u32;

#define TILE 128
#define THREADS 256
#define KB 128
#define LDS 144
#define STAGE_BYTES (2 * TILE * LDS)
#define NSTAGES 3
// dynamic shared memory of a tile-product kernel (brute_gpu.TC_SMEM_BYTES mirrors it): 108 KiB, two blocks an SM
#define TC_SMEM (NSTAGES * STAGE_BYTES)
// tile pairs per block of the filter (brute_gpu.TC_PAIRS_PER_BLOCK mirrors it)
#define PAIRS_PER_BLOCK 16

__device__ __forceinline__ void mma_tile(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_tile(int (&c)[4], const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Bytes k0 .. k0 + KB of the 128 rows of one tile (src: its first row's byte k0) into the slot at s, by
// asynchronous copies (no registers, all in flight at once); the caller commits the group.  Thread x copies
// the 16-byte vectors x mod 8 of rows x / 8, x / 8 + 32, ...: no division, and a chunk shorter than KB
// (vecs < 8) leaves the same threads idle throughout.
__device__ __forceinline__ void stage_rows(unsigned char* s, const unsigned char* __restrict__ src, int rowbytes,
                                           int vecs) {
    const int c = threadIdx.x & 7;
    if (c >= vecs) return;
#pragma unroll
    for (int r = threadIdx.x >> 3; r < TILE; r += THREADS / 8)
        cp_async16(s + r * LDS + c * 16, src + r * (i64)rowbytes + c * 16);
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], unsigned a) {  // a: a shared-memory address
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// acc[mi][ni][e] += the products of one staged chunk of w bytes (A rows at sA, B rows at sB): row
// wr + 16 mi + g + 8 (e >> 1), column wc + 8 ni + 2 t + (e & 1) of the tile product.  The fragments come
// by ldmatrix (four 8 x 16-byte matrices an instruction, 6 loads a 32-byte step where 32-bit loads took
// 24): read as b16 matrices they are the int8 m16n8k32 and fp16 m16n8k16 fragments alike (lane 4g + t
// holds bytes 4t .. 4t + 3 of row g of each matrix), and the 144-byte row pitch puts the 8 rows of a
// matrix on 8 distinct groups of 4 banks.
template <typename Acc>
__device__ __forceinline__ void chunk_product(const unsigned char* sA, const unsigned char* sB, int w,
                                              Acc (&acc)[2][8][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
    // lane l addresses row l & 15 (A: matrices 0, 1 the rows 0-7, 8-15; 2, 3 the same 16 bytes on) and,
    // for B, row 8 (l >> 4) + (l & 7) at byte 16 ((l >> 3) & 1)
    // 32-bit shared-memory addresses: two registers fewer than generic pointers (the filter has none to spare)
    const unsigned pa = (unsigned)__cvta_generic_to_shared(sA) + (wr + (lane & 15)) * LDS + (lane >> 4) * 16;
    const unsigned pb = (unsigned)__cvta_generic_to_shared(sB) + (wc + ((lane >> 4) << 3) + (lane & 7)) * LDS
                        + ((lane >> 3) & 1) * 16;
    for (int kk = 0; kk < w; kk += 32) {
        u32 a[2][4], b[4][4];  // b[p]: columns 16 p .. 16 p + 15 (fragments ni = 2 p, 2 p + 1)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(a[mi], pa + mi * 16 * LDS + kk);
#pragma unroll
        for (int q = 0; q < 4; ++q) ldmatrix_x4(b[q], pb + q * 16 * LDS + kk);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const u32 bf[2] = {b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]};
                mma_tile(acc[mi][ni], a[mi], bf);
            }
    }
}

// The tile products of pairs first .. end - 1 of (P, Q), one after another, each handed to
// visit(k, acc).  Items (a pair's chunk of KB bytes) are staged NSTAGES deep in dynamic shared memory
// (TC_SMEM bytes): the copies of the next items are in flight while this item's products and the last
// pair's visit run.  B rows go to the item's stage; A rows to an A slot of their own, loaded only where
// the item's A chunk differs from the last item's: with whole rows in one chunk (nk == 1) a run of pairs
// of one tile of P (the list is in row-major order) loads it once, which halves the bytes read from L2
// on dense lists.  A slots go round by run, NSTAGES of them: the slot a new run takes last served the run
// three before, whose items all finished before the __syncthreads that precedes the staging (the items
// in use then, it and it + 1, belong to the two runs before the new one at the earliest).
template <typename Acc, typename Visit>
__device__ __forceinline__ void tile_products(const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y,
                                              int rowbytes, const i64* __restrict__ P, const i64* __restrict__ Q,
                                              i64 first, i64 end, Visit& visit) {
    extern __shared__ __align__(16) unsigned char stages[];
    unsigned char* const aslots = stages;                           // NSTAGES slots of TILE rows of A
    unsigned char* const bslots = stages + NSTAGES * TILE * LDS;    // NSTAGES stages of TILE rows of B
    const int nk = (rowbytes + KB - 1) / KB;
    const i64 items = (end - first) * nk;
    if (items <= 0) return;
    Acc acc[2][8][4];
    int run = -1;        // A runs staged so far, less one
    unsigned held = 0;   // 2 bits a stage: the A slot of the item staged there
    i64 last_tp = -1;
    auto stage = [&](i64 item) {
        const int st = (int)(item % NSTAGES);
        if (item < items) {
            const i64 k = first + item / nk;
            const int kc = (int)(item % nk), k0 = kc * KB, vecs = min(KB, rowbytes - k0) >> 4;
            const i64 tp = P[k];
            if (nk > 1 || tp != last_tp) {
                run = run + 1 == NSTAGES ? 0 : run + 1;  // run counted modulo NSTAGES: the slot
                stage_rows(aslots + run * TILE * LDS, X + tp * TILE * (i64)rowbytes + k0, rowbytes, vecs);
                last_tp = tp;
            }
            stage_rows(bslots + st * TILE * LDS, Y + Q[k] * TILE * (i64)rowbytes + k0, rowbytes, vecs);
            held = (held & ~(3u << (2 * st))) | ((unsigned)run << (2 * st));
        }
        cp_async_commit();  // an empty group past the end keeps the count that cp.async.wait_group waits on
    };
#pragma unroll
    for (int s = 0; s < NSTAGES - 1; ++s) stage(s);
    for (i64 it = 0; it < items; ++it) {
        cp_async_wait<NSTAGES - 2>();
        __syncthreads();  // item it staged for every thread; every warp done with item it - 1's stage
        stage(it + NSTAGES - 1);
        const i64 k = first + it / nk;
        const int kc = (int)(it % nk), st = (int)(it % NSTAGES);
        if (kc == 0) {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 8; ++ni)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0;
        }
        chunk_product(aslots + ((held >> (2 * st)) & 3u) * TILE * LDS, bslots + st * TILE * LDS,
                      min(KB, rowbytes - kc * KB), acc);
        if (kc == nk - 1) visit(k, acc);
    }
    cp_async_wait<0>();
}

// The filter's test of a product G of row a and column b is G - Y_b >= X_a, with X_a and Y_b per-row and
// per-column thresholds (tc_quant.thresholds, padded to whole tiles with thresholds no product
// reaches): exact in int32 for the int8 products, and for fp16's with G - Y_b rounded up, so a pair whose
// exact difference reaches X_a is kept.
__device__ __forceinline__ int over(int g, int y) { return g - y; }
__device__ __forceinline__ float over(float g, float y) { return __fsub_ru(g, y); }
__device__ __forceinline__ int larger(int a, int b) { return max(a, b); }
__device__ __forceinline__ float larger(float a, float b) { return fmaxf(a, b); }

// The filter: each block forms one tile pair's products and appends the (row, row, tile pair) of every
// product that passes the test above to a candidate list.  The test is one subtraction and one maximum a
// product: each thread takes the largest G - Y_b of each of its rows against the row's X_a, and only a warp
// with a candidate goes on to find which products passed (the bound behind the thresholds, and why a
// separable test: tc_quant.py).  Candidates past `capacity` are counted, not written: the driver then reruns
// the range with room for all.  The float64 decisions run in a second kernel (brute_tc_exact_*), at full
// occupancy, where this one holds 64 accumulators per thread.
template <typename Acc>
struct Filter {
    const i64* __restrict__ P;
    const i64* __restrict__ Q;
    const Acc* __restrict__ tx;
    const Acc* __restrict__ ty;
    int selfjoin, pair_base;
    unsigned long long* __restrict__ cand_counter;
    i64 capacity;
    int2* __restrict__ cand;
    int* __restrict__ cand_pair;

    __device__ __forceinline__ void operator()(i64 pair, Acc (&acc)[2][8][4]) {
    const i64 tp = P[pair], tq = Q[pair];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
    Acc yb[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) {
        const i64 b = tq * TILE + wc + (c >> 1) * 8 + 2 * t + (c & 1);
        yb[c] = ty[b];
    }
    bool any = false;
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // r = 2 mi + h: row wr + 16 mi + g + 8 h
        const int mi = r >> 1, h = r & 1;
        const i64 a = tp * TILE + wr + mi * 16 + g + 8 * h;
        Acc top = over(acc[mi][0][2 * h], yb[0]);
#pragma unroll
        for (int c = 1; c < 16; ++c) top = larger(top, over(acc[mi][c >> 1][2 * h + (c & 1)], yb[c]));
        any |= top >= tx[a];
    }
    if (!__any_sync(0xffffffffu, any)) return;
    const bool diagonal = selfjoin && tp == tq;
    unsigned long long keep = 0ULL;  // a bit per candidate of this thread's 64 products
    // X and Y read again (held through the test above, they spilled registers): 36 loads where a row-by-row
    // loop made 68 (all 20 at once spill again); the block's other warps wait for this one at the next barrier
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
        const int rl = wr + mi * 16 + g;
        const Acc x0 = tx[tp * TILE + rl], x1 = tx[tp * TILE + rl + 8];
#pragma unroll
        for (int c = 0; c < 16; ++c) {
            const int cl = wc + (c >> 1) * 8 + 2 * t + (c & 1);
            const Acc y = ty[tq * TILE + cl];
            if (over(acc[mi][c >> 1][c & 1], y) >= x0 && !(diagonal && cl <= rl))
                keep |= 1ULL << (2 * mi * 16 + c);
            if (over(acc[mi][c >> 1][2 + (c & 1)], y) >= x1 && !(diagonal && cl <= rl + 8))
                keep |= 1ULL << ((2 * mi + 1) * 16 + c);
        }
    }
    // one atomicAdd per warp for the warp's candidates, each lane writing its own after the lanes before it
    const int mine = __popcll(keep);
    int before = mine;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, before, off);
        if (lane >= off) before += v;
    }
    const int total = __shfl_sync(0xffffffffu, before, 31);
    before -= mine;
    unsigned long long base = 0ULL;
    if (lane == 0 && total) base = atomicAdd(cand_counter, (unsigned long long)total);
    base = __shfl_sync(0xffffffffu, base, 0) + before;
    while (keep) {
        const int bit = __ffsll((long long)keep) - 1;
        keep &= keep - 1;
        if ((i64)base < capacity) {
            const int r = bit >> 4, c = bit & 15;
            cand[base] = make_int2((int)(tp * TILE + wr + (r >> 1) * 16 + g + 8 * (r & 1)),
                                   (int)(tq * TILE + wc + (c >> 1) * 8 + 2 * t + (c & 1)));
            if (cand_pair) cand_pair[base] = pair_base + (int)pair;
        }
        ++base;
    }
    }
};

#define FILTER_ARGS(T)                                                                                      \
    const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y, int rowbytes,                  \
    const i64* __restrict__ P, const i64* __restrict__ Q, i64 npairs,                                        \
    const T* __restrict__ tx, const T* __restrict__ ty, int selfjoin, int pair_base,                         \
    unsigned long long* __restrict__ cand_counter, i64 capacity, int2* __restrict__ cand, int* __restrict__ cand_pair

// Each block filters PAIRS_PER_BLOCK consecutive tile pairs of the list.
template <typename Acc>
__device__ __forceinline__ void filter_range(FILTER_ARGS(Acc)) {
    Filter<Acc> visit{P, Q, tx, ty, selfjoin, pair_base, cand_counter, capacity, cand, cand_pair};
    const i64 first = blockIdx.x * (i64)PAIRS_PER_BLOCK;
    tile_products<Acc>(X, Y, rowbytes, P, Q, first, min(first + (i64)PAIRS_PER_BLOCK, npairs), visit);
}
#define FILTER_PASS X, Y, rowbytes, P, Q, npairs, tx, ty, selfjoin, pair_base, cand_counter, capacity, cand, cand_pair

extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_i8(FILTER_ARGS(int)) { filter_range<int>(FILTER_PASS); }
extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_f16(FILTER_ARGS(float)) { filter_range<float>(FILTER_PASS); }

// The float64 decision of candidates [0, count): accepted pairs appended as in brute.cu, in original ids.
template <typename T>
__device__ __forceinline__ void decide(const int2* __restrict__ cand, const int* __restrict__ cand_pair, i64 count,
                                       const T* __restrict__ A, const T* __restrict__ B,
                                       const i64* __restrict__ perm_a, const i64* __restrict__ perm_b, int d,
                                       double eps2, int selfjoin, unsigned long long* __restrict__ counter,
                                       unsigned long long* __restrict__ pair_counts, int per_pair, i64 capacity,
                                       i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od) {
    for (i64 k = blockIdx.x * (i64)blockDim.x + threadIdx.x; k < count; k += (i64)gridDim.x * blockDim.x) {
        const int2 c = cand[k];
        const double s = exact_within(A + c.x * (i64)d, B + c.y * (i64)d, d, eps2);
        if (s < 0.0) continue;
        i64 i = perm_a[c.x], j = perm_b[c.y];
        if (selfjoin && j < i) { const i64 tmp = i; i = j; j = tmp; }
        const unsigned long long pos = claim_slot(counter, counter, 0);
        if (per_pair) atomicAdd(pair_counts + cand_pair[k], 1ULL);
        if ((i64)pos < capacity) {
            oi[pos] = i;
            oj[pos] = j;
            od[pos] = (float)sqrt(s);
        }
    }
}

#define DECIDE_ARGS(T)                                                                                      \
    const int2* __restrict__ cand, const int* __restrict__ cand_pair, i64 count,                             \
    const T* __restrict__ A, const T* __restrict__ B, const i64* __restrict__ perm_a,                        \
    const i64* __restrict__ perm_b, int d, double eps2, int selfjoin, unsigned long long* __restrict__ counter, \
    unsigned long long* __restrict__ pair_counts, int per_pair, i64 capacity,                                \
    i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od
#define DECIDE_PASS cand, cand_pair, count, A, B, perm_a, perm_b, d, eps2, selfjoin, counter, pair_counts, per_pair, \
    capacity, oi, oj, od

// float32 inputs are decided from their float32 rows (converted exactly): half the bytes
extern "C" __global__ void brute_tc_exact_f64(DECIDE_ARGS(double)) { decide<double>(DECIDE_PASS); }
extern "C" __global__ void brute_tc_exact_f32(DECIDE_ARGS(float)) { decide<float>(DECIDE_PASS); }

// The raw tile products of tile pairs (P[k], Q[k]) as float64, out[k][row][col]: lets the tests check
// on the device that the products the filter sees are the exact integer products.
template <typename Acc>
struct ProductsOut {
    double* out;
    __device__ __forceinline__ void operator()(i64 pair, Acc (&acc)[2][8][4]) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
        double* o = out + pair * TILE * TILE;
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 8; ++ni)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    o[(wr + mi * 16 + g + 8 * (e >> 1)) * TILE + wc + ni * 8 + 2 * t + (e & 1)] = (double)acc[mi][ni][e];
    }
};

// One block per tile pair here, through the same pipeline as the filter.
template <typename Acc>
__device__ __forceinline__ void products_out(const unsigned char* X, const unsigned char* Y, int rowbytes,
                                             const i64* P, const i64* Q, double* out) {
    ProductsOut<Acc> visit{out};
    tile_products<Acc>(X, Y, rowbytes, P, Q, (i64)blockIdx.x, (i64)blockIdx.x + 1, visit);
}

extern "C" __global__ void __launch_bounds__(THREADS) tc_products_i8(const unsigned char* X, const unsigned char* Y,
        int rowbytes, const i64* P, const i64* Q, double* out) { products_out<int>(X, Y, rowbytes, P, Q, out); }
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_f16(const unsigned char* X, const unsigned char* Y,
        int rowbytes, const i64* P, const i64* Q, double* out) { products_out<float>(X, Y, rowbytes, P, Q, out); }
