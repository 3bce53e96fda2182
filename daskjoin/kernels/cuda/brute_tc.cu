// Brute-force ε-join on the tensor cores: integer tiles as the filter, float64 as the judge.
//
// Each block takes one pair of 128-row tiles (P[k], Q[k]) of rows quantised to small integers
// (kernels/tc_quant.py): int8 (mma m16n8k32, s32 accumulation) or integers |q| <= 2048 stored as
// fp16 (mma m16n8k16, f32 accumulation, every partial sum an integer below 2^24).  Either way
// the product G = q_a . q_b is exact, so |q_a - q_b|^2 = |q_a|^2 + |q_b|^2 - 2 G is exact in
// float64, and a true pair satisfies
//     |q_a - q_b| <= reach0 + u_a + u_b
// (reach0 >= eps_hi / S, u >= the row's quantisation residual in units of S; proof in
// tc_quant.py and docs/exactness.md).  Rows that pass are decided exactly, in float64 from the
// stored values with dimensions summed in order (__dadd_rn/__dmul_rn: no FMA contraction), as in
// brute.cu; accepted pairs are appended through an atomic counter, the driver sorts them.
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

// acc[mi][ni][e]: row wr + 16 mi + g + 8 (e >> 1), column wc + 8 ni + 2 t + (e & 1) of the tile product.
template <typename Acc>
__device__ __forceinline__ void tile_product(const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y,
                                             int rowbytes, i64 tp, i64 tq, Acc (&acc)[2][8][4]) {
    __shared__ __align__(16) unsigned char sA[TILE * LDS];
    __shared__ __align__(16) unsigned char sB[TILE * LDS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0;
    const unsigned char* xa = X + tp * TILE * (i64)rowbytes;
    const unsigned char* yb = Y + tq * TILE * (i64)rowbytes;
    for (int k0 = 0; k0 < rowbytes; k0 += KB) {
        const int w = min(KB, rowbytes - k0);  // a multiple of 32
        const int vecs = w >> 4;
        for (int v = tid; v < TILE * vecs; v += THREADS) {
            const int r = v / vecs, c = v - r * vecs;
            *(uint4*)(sA + r * LDS + c * 16) = *(const uint4*)(xa + r * (i64)rowbytes + k0 + c * 16);
            *(uint4*)(sB + r * LDS + c * 16) = *(const uint4*)(yb + r * (i64)rowbytes + k0 + c * 16);
        }
        __syncthreads();
        for (int kk = 0; kk < w; kk += 32) {
            u32 a[2][4], b[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const unsigned char* p = sA + (wr + mi * 16 + g) * LDS + kk + t * 4;
                a[mi][0] = *(const u32*)p;
                a[mi][1] = *(const u32*)(p + 8 * LDS);
                a[mi][2] = *(const u32*)(p + 16);
                a[mi][3] = *(const u32*)(p + 8 * LDS + 16);
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const unsigned char* p = sB + (wc + ni * 8 + g) * LDS + kk + t * 4;
                b[ni][0] = *(const u32*)p;
                b[ni][1] = *(const u32*)(p + 16);
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 8; ++ni) mma_tile(acc[mi][ni], a[mi], b[ni]);
        }
        __syncthreads();
    }
}

template <typename Acc, typename T>
__device__ __forceinline__ void filter_tiles(
    const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y, int rowbytes,
    const i64* __restrict__ P, const i64* __restrict__ Q, i64 n, i64 m,
    const double* __restrict__ qa, const double* __restrict__ qb,
    const double* __restrict__ ua, const double* __restrict__ ub,
    const T* __restrict__ A, const T* __restrict__ B,
    const i64* __restrict__ perm_a, const i64* __restrict__ perm_b, int d,
    double reach0, double eps2, int selfjoin,
    unsigned long long* __restrict__ counter, unsigned long long* __restrict__ pair_counts, int per_pair,
    i64 capacity, i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od) {
    const i64 pair = blockIdx.x;
    const i64 tp = P[pair], tq = Q[pair];
    Acc acc[2][8][4];
    tile_product(X, Y, rowbytes, tp, tq, acc);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
    const bool diagonal = selfjoin && tp == tq;
    // the filter, over this thread's 64 products: a bit per candidate
    unsigned long long cand = 0ULL;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int rl = wr + mi * 16 + g + 8 * h;
            const i64 a = tp * TILE + rl;
            if (a >= n) continue;
            const double qar = qa[a], uar = ua[a];
#pragma unroll
            for (int ni = 0; ni < 8; ++ni)
#pragma unroll
                for (int e1 = 0; e1 < 2; ++e1) {
                    const int cl = wc + ni * 8 + 2 * t + e1;
                    const i64 b = tq * TILE + cl;
                    if (b >= m || (diagonal && cl <= rl)) continue;
                    const double s = qar + qb[b] - 2.0 * (double)acc[mi][ni][2 * h + e1];  // exact: integers < 2^53
                    const double reach = (reach0 + uar + ub[b]) * (1.0 + 0x1p-40);  // covers this line's roundings
                    if (s <= reach * reach * (1.0 + 0x1p-40))
                        cand |= 1ULL << (((mi * 2 + h) * 8 + ni) * 2 + e1);
                }
        }
    // the exact decision of each candidate
    while (cand) {
        const int bit = __ffsll((long long)cand) - 1;
        cand &= cand - 1;
        const int e1 = bit & 1, ni = (bit >> 1) & 7, h = (bit >> 4) & 1, mi = bit >> 5;
        const i64 a = tp * TILE + wr + mi * 16 + g + 8 * h;
        const i64 b = tq * TILE + wc + ni * 8 + 2 * t + e1;
        const double s = exact_within(A + a * (i64)d, B + b * (i64)d, d, eps2);
        if (s < 0.0) continue;
        i64 i = perm_a[a], j = perm_b[b];
        if (selfjoin && j < i) { const i64 tmp = i; i = j; j = tmp; }
        const unsigned long long pos = claim_slot(counter, pair_counts + pair, per_pair);
        if ((i64)pos < capacity) {
            oi[pos] = i;
            oj[pos] = j;
            od[pos] = (float)sqrt(s);
        }
    }
}

#define FILTER_ARGS(T)                                                                                      \
    const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y, int rowbytes,                  \
    const i64* __restrict__ P, const i64* __restrict__ Q, i64 n, i64 m,                                      \
    const double* __restrict__ qa, const double* __restrict__ qb,                                            \
    const double* __restrict__ ua, const double* __restrict__ ub,                                            \
    const T* __restrict__ A, const T* __restrict__ B,                                                        \
    const i64* __restrict__ perm_a, const i64* __restrict__ perm_b, int d,                                   \
    double reach0, double eps2, int selfjoin,                                                                \
    unsigned long long* __restrict__ counter, unsigned long long* __restrict__ pair_counts, int per_pair,   \
    i64 capacity, i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od
#define FILTER_PASS X, Y, rowbytes, P, Q, n, m, qa, qb, ua, ub, A, B, perm_a, perm_b, d, reach0, eps2, selfjoin, \
    counter, pair_counts, per_pair, capacity, oi, oj, od

// <filter>_<stored rows>: float32 inputs are decided from their float32 rows (converted exactly), half the bytes
extern "C" __global__ void __launch_bounds__(THREADS) brute_tc_i8_f64(FILTER_ARGS(double)) { filter_tiles<int, double>(FILTER_PASS); }
extern "C" __global__ void __launch_bounds__(THREADS) brute_tc_f16_f64(FILTER_ARGS(double)) { filter_tiles<float, double>(FILTER_PASS); }
extern "C" __global__ void __launch_bounds__(THREADS) brute_tc_i8_f32(FILTER_ARGS(float)) { filter_tiles<int, float>(FILTER_PASS); }
extern "C" __global__ void __launch_bounds__(THREADS) brute_tc_f16_f32(FILTER_ARGS(float)) { filter_tiles<float, float>(FILTER_PASS); }

// The raw tile products of tile pairs (P[k], Q[k]) as float64, out[k][row][col]: lets the tests check
// on the device that the products the filter sees are the exact integer products.
template <typename Acc>
__device__ __forceinline__ void products_out(const unsigned char* X, const unsigned char* Y, int rowbytes,
                                             const i64* P, const i64* Q, double* out) {
    Acc acc[2][8][4];
    tile_product(X, Y, rowbytes, P[blockIdx.x], Q[blockIdx.x], acc);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 64;
    double* o = out + (i64)blockIdx.x * TILE * TILE;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[(wr + mi * 16 + g + 8 * (e >> 1)) * TILE + wc + ni * 8 + 2 * t + (e & 1)] = (double)acc[mi][ni][e];
}

extern "C" __global__ void __launch_bounds__(THREADS) tc_products_i8(const unsigned char* X, const unsigned char* Y,
        int rowbytes, const i64* P, const i64* Q, double* out) { products_out<int>(X, Y, rowbytes, P, Q, out); }
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_f16(const unsigned char* X, const unsigned char* Y,
        int rowbytes, const i64* P, const i64* Q, double* out) { products_out<float>(X, Y, rowbytes, P, Q, out); }
