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
// Rows are `rowbytes` bytes (a multiple of 32, zero padded), staged 128 bytes of every row at a time.
// Two ways to form the 128 x 128 tile product share one pipeline and one filter (the `M` policy):
// - MmaSync, any GPU from sm_80: 8 warps, each a 32 x 64 block by mma.sync from fragments that ldmatrix
//   reads from shared memory, rows padded to 144 bytes so that the fragment loads hit 32 distinct banks.
// - Wgmma, Hopper (sm_90a) only: 2 warpgroups, each a 64 x 128 block by wgmma.mma_async straight from
//   shared memory (no fragment loads through registers: ldmatrix read each staged byte 2 to 8 times), rows
//   of 128 bytes in the 128-byte swizzle that wgmma reads (16-byte vector v of row r at v ^ (r mod 8)), staged
//   by bulk tensor copies from tensor maps of the rows (BulkStager; X and Y are then the maps, not the rows).
// The fp16 and int8 instructions read the same bytes of A, B and write the same accumulator layout
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k32" and the wgmma D fragments), so one body serves
// both; each thread holds 64 products, R rows x C columns in m16n8 fragment order (acc_at).

#include "exact.cuh"

typedef unsigned int u32;

#define TILE 128
#define THREADS 256
#define KB 128
#define LDS 144
#define STAGE_BYTES (2 * TILE * LDS)
#define NSTAGES 3
// dynamic shared memory of a mma.sync tile-product kernel (brute_gpu.TC_SMEM_BYTES mirrors it): 108 KiB, two
// blocks an SM
#define TC_SMEM (NSTAGES * STAGE_BYTES)
// the wgmma kernels' stages: NSTAGES A slots and B stages of 16 KiB, and 1 KiB to align them to the swizzle's
// 1,024-byte period
#define WG_STAGES (2 * NSTAGES * TILE * 128 + 1024)
// the wgmma kernels' stage barriers and staging state after their stages: NSTAGES mbarriers (8 bytes), NSTAGES release
// counts, NSTAGES A slots and the two ints of the stager's state (BulkStager)
#define WG_BARRIERS 64
// tile pairs per block of the filter (brute_gpu.TC_PAIRS_PER_BLOCK mirrors it); 32 against 16: uniform 1M x 128 int8
// counted in 0.278 s against 0.296 s (H200, session 25); 64 against 32 once staged in bulk: the kernel 777-784 TOPS
// against 756-760, the count the same (H100, session 26)
#define PAIRS_PER_BLOCK 64
// the wgmma kernels' thresholds, staged with their tiles (4 bytes a row: int32 or float32): the B tile's column
// thresholds in each stage, the A tile's row thresholds in each A slot; then the block's tile pairs (two int32 each)
#define WG_THRESHOLDS (2 * NSTAGES * TILE * 4)
#define WG_PAIRS (PAIRS_PER_BLOCK * 8)
// candidates each warp of a wgmma filter gathers in shared memory (12 bytes each) before it appends them to the list
#define WARP_LIST 128
// dynamic shared memory of the wgmma kernels (brute_gpu.TC_WG_SMEM_BYTES mirrors it): two blocks an SM (2 x 115,264
// bytes and the 1 KiB each block keeps back: 232,576 of the 233,472 an H100 or H200 multiprocessor has)
#define WG_SMEM (WG_STAGES + WG_BARRIERS + WG_THRESHOLDS + WG_PAIRS + (THREADS / 32) * WARP_LIST * 12)

template <typename T> struct Two;
template <> struct Two<int> { typedef int2 type; static constexpr bool INTEGER = true; };
template <> struct Two<float> { typedef float2 type; static constexpr bool INTEGER = false; };

// What the visit of a tile pair reads besides its products (Filter::test): the pair's tiles (tp, tq), the B
// tile's 128 column thresholds and the A tile's 128 row thresholds (in shared memory where staged in bulk with the
// tiles, else in global memory)
struct Staged {
    int2 tiles;
    const void* ys;
    const void* xs;
};

// Where the product of (row r, column c) of a thread's R x C share sits in its 64 accumulators (m16n8
// fragments): row r is tile row row0 + g + row_off(r), column c tile column col0 + 2 t + col_off(c), for
// lane 4 g + t and the policy's row0, col0 of the thread's warp.
template <typename M>
__device__ __forceinline__ constexpr int acc_at(int r, int c) {
    return (r >> 1) * 2 * M::C + (c >> 1) * 4 + 2 * (r & 1) + (c & 1);
}
// the k lowest bits set (0 <= k <= 64)
__device__ __forceinline__ unsigned long long low_bits(int k) { return k >= 64 ? ~0ULL : (1ULL << k) - 1ULL; }
__device__ __forceinline__ int row_off(int r) { return 16 * (r >> 1) + 8 * (r & 1); }
__device__ __forceinline__ int col_off(int c) { return 8 * (c >> 1) + (c & 1); }

__device__ __forceinline__ void mma_tile(float* c, const u32 (&a)[4], const u32 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_tile(int* c, const u32 (&a)[4], const u32 (&b)[2]) {
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
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], unsigned a) {  // a: a shared-memory address
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

struct MmaSync {
    static constexpr int R = 4, C = 16, SLOT = TILE * LDS;
    static constexpr bool BULK = false;  // staged by every thread's cp.async, a block barrier an item
    static constexpr bool PAIRED = false;  // the filter's column thresholds loaded one at a time (paired: spills)
    static constexpr bool GATHERED = false;  // candidates appended at once (no shared memory left for WARP_LIST)
    __device__ static int row0() { return ((threadIdx.x >> 5) >> 1) * 32; }
    __device__ static int col0() { return ((threadIdx.x >> 5) & 1) * 64; }
    __device__ static unsigned char* base(unsigned char* stages) { return stages; }
    __device__ static int at(int r, int v) { return r * LDS + v * 16; }  // 16-byte vector v of row r
    template <typename Acc>
    __device__ static void settle(Acc*) {}  // mma.sync's products are in the registers when `product` returns

    // acc += the products of one staged chunk of w bytes (A rows at sA, B rows at sB), zeroed first if
    // `fresh`.  The fragments come by ldmatrix (four 8 x 16-byte matrices an instruction, 6 loads a 32-byte
    // step where 32-bit loads took 24): read as b16 matrices they are the int8 m16n8k32 and fp16 m16n8k16
    // fragments alike (lane 4g + t holds bytes 4t .. 4t + 3 of row g of each matrix), and the 144-byte row
    // pitch puts the 8 rows of a matrix on 8 distinct groups of 4 banks.
    template <typename Acc>
    __device__ static void product(const unsigned char* sA, const unsigned char* sB, int w, bool fresh, Acc* acc) {
        if (fresh) {
#pragma unroll
            for (int e = 0; e < 64; ++e) acc[e] = 0;
        }
        const int lane = threadIdx.x & 31;
        // lane l addresses row l & 15 (A: matrices 0, 1 the rows 0-7, 8-15; 2, 3 the same 16 bytes on) and,
        // for B, row 8 (l >> 4) + (l & 7) at byte 16 ((l >> 3) & 1)
        // 32-bit shared-memory addresses: two registers fewer than generic pointers (the filter has none to spare)
        const unsigned pa = (unsigned)__cvta_generic_to_shared(sA) + (row0() + (lane & 15)) * LDS + (lane >> 4) * 16;
        const unsigned pb = (unsigned)__cvta_generic_to_shared(sB) + (col0() + ((lane >> 4) << 3) + (lane & 7)) * LDS
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
                    mma_tile(acc + (mi * 8 + ni) * 4, a[mi], bf);
                }
        }
    }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_D8(k) D(d[k]), D(d[k + 1]), D(d[k + 2]), D(d[k + 3]), D(d[k + 4]), D(d[k + 5]), D(d[k + 6]), D(d[k + 7])
#define WG_D64 WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
#define WG_REGS                                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// A shared-memory matrix descriptor: rows of 128 bytes in the 128-byte swizzle (mode 1, bits 62-63), 8-row
// groups 1,024 bytes apart (stride offset, bits 32-45); the leading offset (bits 16-29) is set to 1 and ignored
// by this layout.  Its high word is the same for every tile (WG_DESC_HI); its low word holds the address of a
// tile's first row, a multiple of 1,024 (the k-steps advance it).  The kernels pass low words only: 32-bit
// arithmetic is all the slots and k-steps need, and 64-bit descriptors cost ~40 instructions a tile pair.
#define WG_DESC_HI 0x40000040  // (1024 >> 4) | (1 << 30)
__device__ __forceinline__ unsigned wg_desc_lo(unsigned addr) { return ((addr & 0x3FFFFu) >> 4) | (1u << 16); }
#define WG_STR(x) #x
#define WG_XSTR(x) WG_STR(x)
#define WG_DESCS ".reg .b32 hi;\n.reg .b64 da, db;\nmov.b32 hi, " WG_XSTR(WG_DESC_HI) ";\nmov.b64 da, {%64, hi};\n" \
    "mov.b64 db, {%65, hi};\n"

// d (+)= A B^T of 64 rows of A and 128 of B, 32 bytes of each (k32 int8, k16 fp16), both K-major in shared
// memory behind descriptors (their low words alo, blo); `add` 0 starts a fresh sum
__device__ __forceinline__ void wgmma_tile(int* d, unsigned alo, unsigned blo, int add) {
#define D(x) "+r"(x)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" WG_DESCS
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " WG_REGS ", da, db, p;\n}\n"
                 : WG_D64 : "r"(alo), "r"(blo), "r"(add));
#undef D
}
__device__ __forceinline__ void wgmma_tile(float* d, unsigned alo, unsigned blo, int add) {
#define D(x) "+f"(x)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" WG_DESCS
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WG_REGS ", da, db, p, 1, 1, 0, 0;\n}\n"
                 : WG_D64 : "r"(alo), "r"(blo), "r"(add));
#undef D
}
// the accumulators pinned around the asynchronous products: no read or write of them moves across
__device__ __forceinline__ void wg_hold(int* d) {
#define D(x) "+r"(x)
    asm volatile("" : WG_D64 :: "memory");
#undef D
}
__device__ __forceinline__ void wg_hold(float* d) {
#define D(x) "+f"(x)
    asm volatile("" : WG_D64 :: "memory");
#undef D
}



struct Wgmma {
    static constexpr int R = 2, C = 32, SLOT = TILE * 128;
    static constexpr bool BULK = true;  // staged by the tensor memory accelerator (BulkStager)
    static constexpr bool PAIRED = true;  // two at a time
    static constexpr bool GATHERED = true;  // gathered by each warp first (WARP_LIST)
    __device__ static int row0() { const int w = threadIdx.x >> 5; return (w >> 2) * 64 + (w & 3) * 16; }
    __device__ static int col0() { return 0; }
    __device__ static unsigned char* base(unsigned char* stages) {  // the swizzle repeats every 1,024 bytes
        const unsigned s = (unsigned)__cvta_generic_to_shared(stages);
        return stages + (((s + 1023u) & ~1023u) - s);
    }

    // acc (+)= the products of one staged chunk (A rows at sA: this warpgroup's 64; B rows at sB), fresh if `fresh`:
    // issued here, awaited by `settle`, the caller's loads in between.  Always the whole KB bytes: the bulk copy
    // fills a chunk past the rows' end with zeros, whose products add nothing (a guard on the chunk's width w cost a
    // branch and an injected warpgroup.arrive a k-step, and a dummy wgmma to carry the commit).  Two blocks an SM overlap
    // one's products with the other's filter.  A pipelined form (the next pair's products issued into a second set
    // of 64 accumulators before this pair's filter, one block an SM) was measured slower: 375 TOPS against 519 on
    // uniform 1M x 128 int8, H200 (session 24).
    // (da, db: the low words of the descriptors of this warpgroup's A rows and of the B rows, wg_desc_lo)
    template <typename Acc>
    __device__ static void product(unsigned da, unsigned db, bool fresh, Acc* acc) {
        // the k-step's 32 bytes advance the descriptors' address field (bits 0-13, in units of 16 bytes) by 2, at
        // most 6 in all: no carry, the tile's address being a multiple of 1,024 (the field's low 6 bits zero) in a
        // shared window below 2^18 bytes
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        // unrolled (in a pipelined form, a loop over a run-time count of steps had made ptxas serialise every
        // wgmma: message C7514)
#pragma unroll
        for (int kk = 0; kk < KB; kk += 32) wgmma_tile(acc, da + (kk >> 4), db + (kk >> 4), !(fresh && kk == 0));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    // the products issued by `product` awaited: the caller's loads in between (the visit's thresholds) overlap them
    template <typename Acc>
    __device__ static void settle(Acc* acc) {
        wgmma_wait<0>();
        wg_hold(acc);
    }
};
#endif

// Bytes k0 .. k0 + KB of the 128 rows of one tile (src: its first row's byte k0) into the slot at s, by
// asynchronous copies (no registers, all in flight at once); the caller commits the group.  Thread x copies
// the 16-byte vectors x mod 8 of rows x / 8, x / 8 + 32, ...: no division, and a chunk shorter than KB
// (vecs < 8) leaves the same threads idle throughout.  The layout places row r + 32 i at at(r, c) + at(32 i, 0): a
// fixed count of copies from two base addresses.  (The mma.sync form's stager; Hopper's is BulkStager.)
template <typename M>
__device__ __forceinline__ void stage_rows(unsigned char* s, const unsigned char* __restrict__ src, int rowbytes,
                                           int vecs) {
    constexpr int ROWS = THREADS / 8;  // rows a pass
    const int c = threadIdx.x & 7, r = threadIdx.x >> 3;
    if (c >= vecs) return;
    unsigned char* const d = s + M::at(r, c);
    const unsigned char* const g = src + r * (i64)rowbytes + c * 16;
    const i64 step = ROWS * (i64)rowbytes;
#pragma unroll
    for (int i = 0; i < TILE / ROWS; ++i) cp_async16(d + M::at(i * ROWS, 0), g + i * step);
}

// The copies of items (a tile pair's chunk of KB bytes: item i is chunk i mod nk of pair first + i / nk) into
// NSTAGES stages of shared memory: B rows to the item's stage (i mod NSTAGES); A rows to an A slot of their
// own, loaded only where the item's A chunk differs from the last item's: with whole rows in one chunk
// (nk == 1) a run of pairs of one tile of P (a row of one of the list's blocks, brute_gpu.PAIR_BLOCK) loads it
// once, which halves the bytes read from L2 on dense lists.  A slots go round by run, NSTAGES of them: the slot a new run takes last
// served the run three before, whose items all finished before the __syncthreads that precedes the staging
// (the items in use then, it and it + 1, belong to the two runs before the new one at the earliest).  Items
// are staged in order, one a call, each call committing one group of copies (an empty one past the end, which
// keeps the count that cp.async.wait_group waits on).  The item's pair, chunk and stage are counted, not
// divided out: 64-bit divisions by the run-time nk were most of the kernel's instructions (session 25).
template <typename M>
struct Stager {
    unsigned char* aslots;
    unsigned char* bslots;
    const unsigned char* __restrict__ X;
    const unsigned char* __restrict__ Y;
    int rowbytes, nk;
    const i64* __restrict__ P;
    const i64* __restrict__ Q;
    int items;                // (end - first) * nk
    int next, next_kc, next_st;  // the item to stage next, its chunk and stage
    i64 next_k;               // its pair
    i64 np, nq;     // the tiles of pair next_k, loaded a call ahead (their latency off the staging's path)
    int run;        // A runs staged so far, less one, modulo NSTAGES: the slot of the last
    unsigned aslot;  // 2 bits a stage: the A slot of the item staged there
    i64 last_tp;

    __device__ __forceinline__ Stager(unsigned char* base, const unsigned char* X_, const unsigned char* Y_,
                                      int rowbytes_, const i64* P_, const i64* Q_, i64 first_, i64 end)
        : aslots(base), bslots(base + NSTAGES * M::SLOT), X(X_), Y(Y_), rowbytes(rowbytes_),
          nk((rowbytes_ + KB - 1) / KB), P(P_), Q(Q_), items((int)(end - first_) * nk), next(0),
          next_kc(0), next_st(0), next_k(first_), np(P_[first_]), nq(Q_[first_]), run(-1), aslot(0), last_tp(-1) {}

    __device__ __forceinline__ void stage_next() {
        if (next < items) {
            const int k0 = next_kc * KB, vecs = min(KB, rowbytes - k0) >> 4;
            if (nk > 1 || np != last_tp) {
                run = run + 1 == NSTAGES ? 0 : run + 1;
                stage_rows<M>(aslots + run * M::SLOT, X + np * TILE * (i64)rowbytes + k0, rowbytes, vecs);
                last_tp = np;
            }
            stage_rows<M>(bslots + next_st * M::SLOT, Y + nq * TILE * (i64)rowbytes + k0, rowbytes, vecs);
            aslot = (aslot & ~(3u << (2 * next_st))) | ((unsigned)run << (2 * next_st));
        }
        cp_async_commit();
        ++next;
        if (++next_st == NSTAGES) next_st = 0;
        if (++next_kc == nk) {
            next_kc = 0;
            if (next < items) { ++next_k; np = P[next_k]; nq = Q[next_k]; }
        }
    }
    // the A and B rows of the item staged in stage st
    __device__ __forceinline__ const unsigned char* a(int st) const { return aslots + ((aslot >> (2 * st)) & 3u) * M::SLOT; }
    __device__ __forceinline__ const unsigned char* b(int st) const { return bslots + st * M::SLOT; }
};

// Hopper's staging (Wgmma): each stage filled by the tensor memory accelerator, one bulk copy a tile chunk of 128
// rows x 128 bytes, which writes it in the 128-byte swizzle wgmma reads (the tensor maps of the rows: brute_gpu.
// tc_operand; a chunk past the row's end reads zeros) and completes on the stage's mbarrier.  No thread copies, no
// block barrier: a warp waits for the stage it needs and, once it has tested (and listed) its products of it,
// counts itself out of it; the eighth warp out stages the item NSTAGES on into it.  So warps drift apart by up to
// NSTAGES - 1 items, where the block barrier of the cp.async form held every warp to every item, and the ~100
// instructions a warp spent staging and waiting each tile pair are gone (Nsight Compute, session 25: the barrier
// the largest stall, the kernel bound by issue).
// The pair's thresholds come with its tiles (one bulk copy of 512 bytes each, into the stage and the A slot) and the
// block's tile pairs are read into shared memory once, so that a warp's loop reads no global memory: the 18 global
// loads a tile pair (thresholds and tile numbers) and the bookkeeping every thread did to know each stage's A slot
// were a third of the loop's instructions (session 30; the staging thread keeps that state in shared memory now).
// A slots as in Stager; a new run's slot last served the run three before, whose items were all counted out
// before the stage of item it - 3 was (each warp goes in order), which is what the staging of item it waits for.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
typedef unsigned long long u64;
__device__ __forceinline__ unsigned smem_at(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_at(bar)), "r"(count) : "memory");
}
// the one arrival a stage's phase waits for, with the bytes its copies will bring
__device__ __forceinline__ void mbar_expect(u64* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_at(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_at(bar)), "r"(parity) : "memory");
    } while (!done);
}
// 128 rows from `row`, bytes k0 .. k0 + 127 of each, of the tensor map at `map` (in global memory) into dst
__device__ __forceinline__ void bulk_tile(unsigned char* dst, const void* map, int k0, int row, u64* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_at(dst)), "l"(map), "r"(k0), "r"(row), "r"(smem_at(bar)) : "memory");
}
// one more warp out of a stage; the count before (acq_rel: the warps' reads before it, the copy after the last)
__device__ __forceinline__ unsigned count_out(unsigned* count) {
    unsigned before;
    asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n" : "=r"(before) : "r"(smem_at(count)) : "memory");
    return before;
}

// `bytes` bytes from global src to shared dst (both 16-byte aligned, bytes a multiple of 16), completing on bar
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_at(dst)), "l"(src), "r"(bytes), "r"(smem_at(bar)) : "memory");
}

template <typename M, bool ONE>
struct BulkStager {
    // Shared memory after the stages (at `bar`): NSTAGES mbarriers (stage s's copies landed), NSTAGES counts of warps
    // out of a stage (never reset: the eighth of each eight stages it), the A slot each stage's item reads, and the
    // issuers' state (the A run's slot and tile); then (after WG_BARRIERS) each stage's column thresholds, each A
    // slot's row thresholds, the block's tile pairs.  Only the thread that stages an item reads and writes the
    // state and the item's A slot: the warp that counts itself out of a stage last (count_out), after every other
    // warp (acq_rel), and so after the thread that staged the item before (which staged it before it counted itself
    // out of this stage: tile_products_bulk stages an item once the next item's products are issued); its writes
    // reach the item's readers with the stage's mbarrier.  So every other thread keeps
    // only the item counters (uniform across the block), and no register holds an A slot between items.
    unsigned char* bar;
    const void* mapA;
    const void* mapB;
    const unsigned char* tx;  // the thresholds in global memory (4 bytes a row), or null: none staged (ProductsOut)
    const unsigned char* ty;
    int rowbytes, nk;
    int items, next, next_kc, next_st, next_k;  // next_k: the pair of item `next`, from first

    __device__ __forceinline__ u64* full() const { return reinterpret_cast<u64*>(bar); }
    __device__ __forceinline__ unsigned* out() const { return reinterpret_cast<unsigned*>(bar + NSTAGES * 8); }
    __device__ __forceinline__ int* slots() const { return reinterpret_cast<int*>(bar + NSTAGES * 12); }
    __device__ __forceinline__ int* state() const { return reinterpret_cast<int*>(bar + NSTAGES * 16); }
    static_assert(NSTAGES * 16 + 8 <= WG_BARRIERS, "the barriers, counts, slots and state fit WG_BARRIERS");
    __device__ __forceinline__ unsigned char* ysl() const { return bar + WG_BARRIERS; }
    __device__ __forceinline__ unsigned char* xsl() const { return ysl() + NSTAGES * TILE * 4; }
    __device__ __forceinline__ const int2* pairs() const { return reinterpret_cast<const int2*>(ysl() + WG_THRESHOLDS); }
    __device__ __forceinline__ unsigned char* aslots() const { return M::base(bar - WG_STAGES); }
    __device__ __forceinline__ unsigned char* bslots() const { return aslots() + NSTAGES * M::SLOT; }

    __device__ __forceinline__ BulkStager(unsigned char* bar_, const void* mapA_, const void* mapB_, const void* tx_,
                                          const void* ty_, int rowbytes_, const i64* P, const i64* Q, i64 first,
                                          i64 end)
        : bar(bar_), mapA(mapA_), mapB(mapB_), tx(static_cast<const unsigned char*>(tx_)),
          ty(static_cast<const unsigned char*>(ty_)), rowbytes(rowbytes_), nk(ONE ? 1 : (rowbytes_ + KB - 1) / KB),
          items((int)(end - first) * nk), next(0), next_kc(0), next_st(0), next_k(0) {
        if (threadIdx.x == 0) {
            for (int s = 0; s < NSTAGES; ++s) { mbar_init(full() + s, 1); out()[s] = 0; }
            state()[0] = NSTAGES - 1;  // the first run takes slot 0
            state()[1] = -1;
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        // the block's tile pairs, once (tile numbers below 2^31: their rows are int32 coordinates of the maps)
        int2* const own = reinterpret_cast<int2*>(ysl() + WG_THRESHOLDS);
        for (int k = threadIdx.x; k < (int)(end - first); k += THREADS)
            own[k] = make_int2((int)P[first + k], (int)Q[first + k]);
        // the maps were written by a copy from the host, and their device memory may have held other maps before
        // (CuPy's pool): each thread that may issue copies (any warp's lane 0: the last warp out of a stage)
        // orders those writes before its own reads of the maps, at system scope as for a copy from the host
        asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;\n" ::"l"(mapA) : "memory");
        asm volatile("fence.proxy.tensormap::generic.acquire.sys [%0], 128;\n" ::"l"(mapB) : "memory");
        __syncthreads();
    }

    // the next item into its stage (`issue`: this thread stages it; every thread counts); the last chunk of a pair
    // brings the pair's thresholds with its rows
    __device__ __forceinline__ void stage_next(bool issue) {
        if (issue && next < items) {
            const int2 t = pairs()[next_k];
            int run = state()[0];
            const bool new_a = nk > 1 || t.x != state()[1];
            if (new_a) {
                run = run + 1 == NSTAGES ? 0 : run + 1;
                state()[0] = run;
                state()[1] = t.x;
            }
            slots()[next_st] = run;
            const int k0 = next_kc * KB;
            const bool thr = tx != nullptr && next_kc == nk - 1;
            const unsigned bytes = TILE * 128 + (thr ? TILE * 4 : 0);
            u64* const landed = full() + next_st;
            // the generic reads of the stage's thresholds by every warp (ordered before by count_out) before the
            // copies' writes, which the async proxy makes
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            mbar_expect(landed, (new_a ? 2u : 1u) * bytes);  // (a release: the slot and state written before)
            if (new_a) {
                bulk_tile(aslots() + run * M::SLOT, mapA, k0, t.x * TILE, landed);
                if (thr) bulk_copy(xsl() + run * TILE * 4, tx + (i64)t.x * TILE * 4, TILE * 4, landed);
            }
            bulk_tile(bslots() + next_st * M::SLOT, mapB, k0, t.y * TILE, landed);
            if (thr) bulk_copy(ysl() + next_st * TILE * 4, ty + (i64)t.y * TILE * 4, TILE * 4, landed);
        }
        ++next;
        if (++next_st == NSTAGES) next_st = 0;
        if (++next_kc == nk) { next_kc = 0; ++next_k; }
    }
    // the A slot of the item in stage st, once its copies landed
    __device__ __forceinline__ int slot(int st) const { return slots()[st]; }
    // what the visit of pair k (from first) reads, its last chunk staged in stage st, its A in `slot`
    __device__ __forceinline__ Staged staged(int k, int st, int slot) const {
        return Staged{pairs()[k], ysl() + st * TILE * 4, xsl() + slot * TILE * 4};
    }
};

template <typename M, typename Acc, bool ONE, typename Visit>
__device__ __forceinline__ void tile_products_bulk(const void* mapA, const void* mapB, const void* tx, const void* ty,
                                                   int rowbytes, const i64* __restrict__ P, const i64* __restrict__ Q,
                                                   i64 first, i64 end, Visit& visit) {
    extern __shared__ __align__(16) unsigned char stages[];
    if (end <= first) return;
    BulkStager<M, ONE> stage(stages + WG_STAGES, mapA, mapB, tx, ty, rowbytes, P, Q, first, end);
    Acc acc[64];
#pragma unroll
    for (int s = 0; s < NSTAGES; ++s) stage.stage_next(threadIdx.x == 0);
    const int lane = threadIdx.x & 31;
    // the descriptors' low words of slot 0 (this warpgroup's 64 rows) and stage 0: each slot, stage 16 KiB on
    const unsigned da0 = wg_desc_lo(smem_at(stage.aslots()) + (threadIdx.x >> 7) * 64 * 128);
    const unsigned db0 = wg_desc_lo(smem_at(stage.bslots()));
    int st = 0, kc = 0, k = 0;  // item it's stage, chunk, and pair (from first)
    unsigned phase = 0;  // of item it's stage: flips each time the stages come round
    unsigned long long pending = 0ULL;  // Visit::DEFER_GATHER: the candidates of pair pending_k, not yet written
    int pending_k = 0;
    // lane 0's count of the warps out of the last item's stage before this one (count_out): its atomic's result
    // is used only after this item's products are issued, so the warp does not wait for it in between
    unsigned ticket = 0u;
    for (int it = 0; it < stage.items; ++it) {
        mbar_wait(stage.full() + st, phase);
        const bool last = kc == stage.nk - 1;
        const int slot = stage.slot(st);
        M::product(da0 + slot * (M::SLOT >> 4), db0 + st * (M::SLOT >> 4), kc == 0, acc);
        // the last item's stage refilled (item it - 1 + NSTAGES) by the warp that counted itself out of it last
        if (it > 0) stage.stage_next(lane == 0 && ticket % (THREADS / 32) == THREADS / 32 - 1);
        // the last pair's candidates written while these products form (Visit::DEFER_GATHER): a listing warp's
        // prefix sum and writes no longer hold its warpgroup's next wgmma
        if constexpr (Visit::DEFER_GATHER)
            if (__any_sync(0xffffffffu, pending != 0ULL)) {
                visit.gather(first + pending_k, pending);
                pending = 0ULL;
            }
        M::settle(acc);
        // the test reads the stage's thresholds before this warp counts itself out of the stage, and so does the
        // list where it can (Visit::LIST_IN_STAGE; the column thresholds from global memory held a listing warp
        // ~600 cycles), else it reads them from global memory after
        unsigned hit = 0u;
        if (last) {
            const Staged at = stage.staged(k, st, slot);
            hit = visit.test(at, acc);
            if constexpr (Visit::DEFER_GATHER) {
                pending = visit.mark(static_cast<const Acc*>(at.ys), acc, hit);
                pending_k = k;
            } else if constexpr (Visit::LIST_IN_STAGE) {
                visit.list(first + k, static_cast<const Acc*>(at.ys), acc, hit);
            }
        }
        __syncwarp();
        if (lane == 0) ticket = count_out(stage.out() + st);
        if constexpr (!Visit::LIST_IN_STAGE)
            if (last) visit.list(first + k, visit.column_thresholds(), acc, hit);
        if (++st == NSTAGES) { st = 0; phase ^= 1u; }
        if (++kc == stage.nk) { kc = 0; ++k; }
    }
    if constexpr (Visit::DEFER_GATHER)
        if (__any_sync(0xffffffffu, pending != 0ULL)) visit.gather(first + pending_k, pending);
}
#endif

// The tile products of pairs first .. end - 1 of (P, Q), one after another, each handed to the visit: hit =
// visit.test(what it reads: Staged, acc), then visit.list(k, the column thresholds, acc, hit) (a Visit provides
// both, LIST_IN_STAGE and column_thresholds): items staged NSTAGES deep, so that the copies of the next two are in
// flight while this item's products and the last pair's visit run.  tx, ty: the row and column thresholds (4
// bytes a row, 16-byte aligned, padded to whole tiles), or null where the visit reads none.
template <typename M, typename Acc, typename Visit>
__device__ __forceinline__ void tile_products(const unsigned char* __restrict__ X, const unsigned char* __restrict__ Y,
                                              const void* tx, const void* ty, int rowbytes,
                                              const i64* __restrict__ P, const i64* __restrict__ Q,
                                              i64 first, i64 end, Visit& visit) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (M::BULK) {  // X and Y are the rows' tensor maps
        // whole rows in one chunk (d <= 128 int8, <= 64 fp16) compiled apart: the chunk counters fold away
        if (rowbytes <= KB) tile_products_bulk<M, Acc, true>(X, Y, tx, ty, rowbytes, P, Q, first, end, visit);
        else tile_products_bulk<M, Acc, false>(X, Y, tx, ty, rowbytes, P, Q, first, end, visit);
    } else  // (so the cp.async stager is not compiled for the bulk form)
#endif
    {
        extern __shared__ __align__(16) unsigned char stages[];
        if (end <= first) return;
        Stager<M> stage(M::base(stages), X, Y, rowbytes, P, Q, first, end);
        Acc acc[64];
#pragma unroll
        for (int s = 0; s < NSTAGES - 1; ++s) stage.stage_next();
        int st = 0, kc = 0;  // item it's stage and chunk
        i64 pair = first;    // and pair
        for (int it = 0; it < stage.items; ++it) {
            cp_async_wait<NSTAGES - 2>();
            __syncthreads();  // item it staged for every thread; every warp done with item it - 1's stage
            stage.stage_next();
            const bool last = kc == stage.nk - 1;
            M::product(stage.a(st), stage.b(st), min(KB, rowbytes - kc * KB), kc == 0, acc);
            M::settle(acc);
            if (last) {
                const int tp = (int)P[pair], tq = (int)Q[pair];
                const Acc* const ys = static_cast<const Acc*>(ty) + (i64)tq * TILE;
                visit.list(pair, ys, acc, visit.test(Staged{make_int2(tp, tq), ys, static_cast<const Acc*>(tx) + (i64)tp * TILE}, acc));
            }
            if (++st == NSTAGES) st = 0;
            if (++kc == stage.nk) { kc = 0; ++pair; }
        }
        cp_async_wait<0>();
    }
}

// The filter's test of a product G of row a and column b is G - Y_b >= X_a, with X_a and Y_b per-row and
// per-column thresholds (tc_quant.thresholds, padded to whole tiles with thresholds no product
// reaches): exact in int32 for the int8 products, and for fp16's with G - Y_b rounded up, so a pair whose
// exact difference reaches X_a is kept.
__device__ __forceinline__ int over(int g, int y) { return g - y; }
__device__ __forceinline__ float over(float g, float y) { return __fsub_ru(g, y); }
__device__ __forceinline__ int larger(int a, int b) { return max(a, b); }
__device__ __forceinline__ float larger(float a, float b) { return fmaxf(a, b); }

// The filter: each block forms the products of its tile pairs, one pair after another, and appends the (row,
// row, tile pair) of every product that passes the test above to a candidate list.  The test is one subtraction and one maximum a
// product: each thread takes the largest G - Y_b of each of its rows against the row's X_a, and only a warp
// with a candidate goes on to find which products passed (the bound behind the thresholds, and why a
// separable test: tc_quant.py).  The column thresholds are read as the test uses them and again, a pair of
// adjacent columns at a time, to find the candidates (test, then list).  Candidates past `capacity` are counted, not
// written: the driver then reruns the range with room for all.  The
// float64 decisions run in a second kernel (brute_tc_exact_*), at full occupancy, where this one holds 64
// accumulators per thread.
template <typename M, typename Acc>
struct Filter {
    const Acc* __restrict__ ty;
    int selfjoin, pair_base;
    unsigned long long* __restrict__ cand_counter;
    i64 capacity;
    int2* __restrict__ cand;
    int* __restrict__ cand_pair;

    // the pair's tile numbers and row thresholds (test), for its list
    int tp, tq;
    Acc x[M::R];
    // whether the list is made from the stage's column thresholds (tile_products_bulk): for int8's; fp16's test
    // holds more registers (a rounded subtraction, then a maximum: two instructions a product where int8's take
    // one), and listing from the stage made it spill
    static constexpr bool LIST_IN_STAGE = Two<Acc>::INTEGER;
    // and, where it is, the candidates marked in the stage but written while the next pair's products form
    static constexpr bool DEFER_GATHER = LIST_IN_STAGE;
    // the pair's column thresholds in global memory
    __device__ __forceinline__ const Acc* column_thresholds() const { return ty + (i64)tq * TILE; }
    // M::GATHERED: the warp's gathered candidates (WARP_LIST at most: rows and columns, tile pairs) and their count
    // (in shared memory after the stages, barriers, thresholds and tile pairs: each warp's rows and columns, then
    // each warp's tile pairs; found from the warp's number at each use, not held in registers)
    __device__ __forceinline__ static unsigned char* lists() {
        extern __shared__ __align__(16) unsigned char stages[];
        return stages + WG_STAGES + WG_BARRIERS + WG_THRESHOLDS + WG_PAIRS;
    }
    __device__ __forceinline__ static int2* gathered() { return reinterpret_cast<int2*>(lists()) + (threadIdx.x >> 5) * WARP_LIST; }
    __device__ __forceinline__ static int* gathered_pair() {
        return reinterpret_cast<int*>(lists() + (THREADS / 32) * WARP_LIST * 8) + (threadIdx.x >> 5) * WARP_LIST;
    }
    int gathered_n = 0;

    // the warp's gathered candidates appended to the list (one atomic): called by every lane of the warp
    __device__ __forceinline__ void flush() {
        const int lane = threadIdx.x & 31;
        unsigned long long base = 0ULL;
        if (lane == 0 && gathered_n) base = atomicAdd(cand_counter, (unsigned long long)gathered_n);
        base = __shfl_sync(0xffffffffu, base, 0);
        for (int k = lane; k < gathered_n; k += 32)
            if ((i64)(base + k) < capacity) {
                cand[base + k] = gathered()[k];
                if (cand_pair) cand_pair[base + k] = gathered_pair()[k];
            }
        __syncwarp();
        gathered_n = 0;
    }

    // The test of every product of this thread against its row's threshold, reading the pair's thresholds at `at`
    // (Staged): bit r of the result, row r has a product that passes.  The column thresholds are read as they are
    // used, two adjacent columns a load where M::PAIRED, not held through the products (32 registers a thread).
    __device__ __forceinline__ unsigned test(const Staged& at, const Acc* acc) {
        tp = at.tiles.x;
        tq = at.tiles.y;
        const int lane = threadIdx.x & 31;
        // row r's threshold at xr[row_off(r)], column c's at yc[col_off(c)]
        const Acc* const xr = static_cast<const Acc*>(at.xs) + M::row0() + (lane >> 2);
        const Acc* const yc = static_cast<const Acc*>(at.ys) + M::col0() + 2 * (lane & 3);
#pragma unroll
        for (int r = 0; r < M::R; ++r) x[r] = xr[row_off(r)];
        // four independent running maxima a row: one chain of C dependent instructions left the warps waiting
        Acc top[M::R][4];
#pragma unroll
        for (int p = 0; p < M::C / 2; ++p) {  // columns 2p, 2p + 1: col_off 8p and 8p + 1
            Acc y0, y1;
            if constexpr (M::PAIRED) {
                const typename Two<Acc>::type y = *reinterpret_cast<const typename Two<Acc>::type*>(yc + col_off(2 * p));
                y0 = y.x;
                y1 = y.y;
            } else {
                y0 = yc[col_off(2 * p)];
                y1 = yc[col_off(2 * p + 1)];
            }
#pragma unroll
            for (int r = 0; r < M::R; ++r) {
                const Acc o0 = over(acc[acc_at<M>(r, 2 * p)], y0), o1 = over(acc[acc_at<M>(r, 2 * p + 1)], y1);
                const int c0 = (2 * p) & 3, c1 = (2 * p + 1) & 3;
                top[r][c0] = p < 2 ? o0 : larger(top[r][c0], o0);
                top[r][c1] = p < 2 ? o1 : larger(top[r][c1], o1);
            }
        }
        unsigned hit = 0;
#pragma unroll
        for (int r = 0; r < M::R; ++r)
            hit |= (unsigned)(larger(larger(top[r][0], top[r][1]), larger(top[r][2], top[r][3])) >= x[r]) << r;
        return hit;
    }

    // The candidates of a pair whose test found any (hit: test's result) listed: only the rows that passed are
    // tested product by product (mark), then written (gather).
    __device__ __forceinline__ void list(i64 pair, const Acc* ys, const Acc* acc, unsigned hit) {
        if (!__any_sync(0xffffffffu, hit != 0)) return;
        gather(pair, mark(ys, acc, hit));
    }
    // The candidates of the pair whose products acc holds (hit: test's result), this thread's: bit r C + c, product
    // (r, c) is a candidate.  Only the rows that passed are tested product by product.
    __device__ __forceinline__ unsigned long long mark(const Acc* ys, const Acc* acc, unsigned hit) {
    const int lane = threadIdx.x & 31;
    const int r0 = M::row0() + (lane >> 2), c0 = M::col0() + 2 * (lane & 3);  // tile row, column of (0, 0)
    unsigned long long keep = 0ULL;  // bit r C + c: product (r, c) is a candidate
    if (!__any_sync(0xffffffffu, hit != 0)) return keep;
    // the column thresholds read again, two at a time, from ys (the pair's 128: the stage's, where the list is made
    // before the warp counts itself out of the stage, else global memory's)
    const Acc* const yc = ys + c0;
#pragma unroll
    for (int r = 0; r < M::R; ++r)
        if ((hit >> r) & 1u) {
            if constexpr (Two<Acc>::INTEGER) {
                // G - Y_b - X_a's sign bits shifted in, last column first (one three-way addition and one funnel
                // shift a product).  A row that passed is no padding row (X_a = INT8_BEYOND = 2^30 is never
                // reached: G - Y_b <= 2^28 + 2^29), so -2^29 <= X_a <= 2^28, -2^29 <= Y_b <= 2^30 and |G| <= 2^28
                // (tc_quant.thresholds): G - Y_b - X_a lies in [-(2^30 + 2^29), 2^30 + 2^28], inside int32, and its
                // sign is exactly the test's
                unsigned fails = 0u;
#pragma unroll
                for (int p = M::C / 2 - 1; p >= 0; --p) {
                    const typename Two<Acc>::type y = *reinterpret_cast<const typename Two<Acc>::type*>(yc + 8 * p);
                    fails = __funnelshift_l(acc[acc_at<M>(r, 2 * p + 1)] - y.y - x[r], fails, 1);
                    fails = __funnelshift_l(acc[acc_at<M>(r, 2 * p)] - y.x - x[r], fails, 1);
                }
                keep |= (unsigned long long)(~fails & (unsigned)low_bits(M::C)) << (r * M::C);
            } else {
#pragma unroll
                for (int p = 0; p < M::C / 2; ++p) {
                    const typename Two<Acc>::type y = *reinterpret_cast<const typename Two<Acc>::type*>(yc + 8 * p);
                    if (over(acc[acc_at<M>(r, 2 * p)], y.x) >= x[r]) keep |= 1ULL << (r * M::C + 2 * p);
                    if (over(acc[acc_at<M>(r, 2 * p + 1)], y.y) >= x[r]) keep |= 1ULL << (r * M::C + 2 * p + 1);
                }
            }
        }
    if (selfjoin && tp == tq) {  // a tile with itself: each pair once, column above row
        // row r's columns c = 2p + b (tile column c0 + 8p + b) on or left of the diagonal: 8p + b <= D, i.e. the even
        // bits below 2 n0 and the odd bits below 2 n1 (computed, not tested column by column: 64 compares of hoisted
        // column numbers left too few registers)
#pragma unroll
        for (int r = 0; r < M::R; ++r) {
            const int D = r0 + row_off(r) - c0;
            const int n0 = D < 0 ? 0 : min(M::C / 2, (D >> 3) + 1), n1 = D < 1 ? 0 : min(M::C / 2, ((D - 1) >> 3) + 1);
            const unsigned long long below = (0x5555555555555555ULL & low_bits(2 * n0)) | (0xAAAAAAAAAAAAAAAAULL & low_bits(2 * n1));
            keep &= ~((below & low_bits(M::C)) << (r * M::C));
        }
    }
    return keep;
    }
    // The candidates marked (mark) of pair `pair` (tiles tp, tq) written: called by every lane of the warp.
    __device__ __forceinline__ void gather(i64 pair, unsigned long long keep) {
    const int lane = threadIdx.x & 31;
    const int r0 = M::row0() + (lane >> 2), c0 = M::col0() + 2 * (lane & 3);  // tile row, column of (0, 0)
    // each lane writes its own candidates after the lanes before it: to the warp's gathered list where they fit
    // (an atomic on the list's one counter for every warp that found any had each wait for it), else to the list
    // with one atomicAdd for the warp
    const int mine = __popcll(keep);
    int before = mine;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, before, off);
        if (lane >= off) before += v;
    }
    const int total = __shfl_sync(0xffffffffu, before, 31);
    before -= mine;
    if constexpr (M::GATHERED) {
        if (total <= WARP_LIST) {
            if (gathered_n + total > WARP_LIST) flush();
            for (int k = gathered_n + before; keep; ++k) {
                const int bit = __ffsll((long long)keep) - 1;
                keep &= keep - 1;
                const int r = bit / M::C, c = bit % M::C;
                gathered()[k] = make_int2(tp * TILE + r0 + row_off(r), tq * TILE + c0 + col_off(c));
                if (cand_pair) gathered_pair()[k] = pair_base + (int)pair;
            }
            gathered_n += total;
            __syncwarp();
            return;
        }
    }
    unsigned long long base = 0ULL;
    if (lane == 0 && total) base = atomicAdd(cand_counter, (unsigned long long)total);
    base = __shfl_sync(0xffffffffu, base, 0) + before;
    while (keep) {
        const int bit = __ffsll((long long)keep) - 1;
        keep &= keep - 1;
        if ((i64)base < capacity) {
            const int r = bit / M::C, c = bit % M::C;
            cand[base] = make_int2(tp * TILE + r0 + row_off(r), tq * TILE + c0 + col_off(c));
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
template <typename M, typename Acc>
__device__ __forceinline__ void filter_range(FILTER_ARGS(Acc)) {
    extern __shared__ __align__(16) unsigned char stages[];
    Filter<M, Acc> visit{ty, selfjoin, pair_base, cand_counter, capacity, cand, cand_pair};
    const i64 first = blockIdx.x * (i64)PAIRS_PER_BLOCK;
    tile_products<M, Acc>(X, Y, tx, ty, rowbytes, P, Q, first, min(first + (i64)PAIRS_PER_BLOCK, npairs), visit);
    if constexpr (M::GATHERED) visit.flush();
}
#define FILTER_PASS X, Y, rowbytes, P, Q, npairs, tx, ty, selfjoin, pair_base, cand_counter, capacity, cand, cand_pair

extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_i8(FILTER_ARGS(int)) {
    filter_range<MmaSync, int>(FILTER_PASS);
}
extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_f16(FILTER_ARGS(float)) {
    filter_range<MmaSync, float>(FILTER_PASS);
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_wg_i8(FILTER_ARGS(int)) {
    filter_range<Wgmma, int>(FILTER_PASS);
}
extern "C" __global__ void __launch_bounds__(THREADS, 2) brute_tc_wg_f16(FILTER_ARGS(float)) {
    filter_range<Wgmma, float>(FILTER_PASS);
}
#endif

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
template <typename M, typename Acc>
struct ProductsOut {
    double* out;
    __device__ __forceinline__ unsigned test(const Staged&, const Acc*) { return 0u; }
    static constexpr bool LIST_IN_STAGE = true;
    static constexpr bool DEFER_GATHER = false;
    __device__ __forceinline__ const Acc* column_thresholds() const { return nullptr; }
    __device__ __forceinline__ void list(i64 pair, const Acc*, const Acc* acc, unsigned) {
        const int lane = threadIdx.x & 31;
        const int r0 = M::row0() + (lane >> 2), c0 = M::col0() + 2 * (lane & 3);
        double* o = out + pair * TILE * TILE;
#pragma unroll
        for (int r = 0; r < M::R; ++r)
#pragma unroll
            for (int c = 0; c < M::C; ++c)
                o[(r0 + row_off(r)) * TILE + c0 + col_off(c)] = (double)acc[acc_at<M>(r, c)];
    }
};

// One block per tile pair here, through the same pipeline as the filter.
template <typename M, typename Acc>
__device__ __forceinline__ void products_out(const unsigned char* X, const unsigned char* Y, int rowbytes,
                                             const i64* P, const i64* Q, double* out) {
    ProductsOut<M, Acc> visit{out};
    tile_products<M, Acc>(X, Y, nullptr, nullptr, rowbytes, P, Q, (i64)blockIdx.x, (i64)blockIdx.x + 1, visit);
}

#define PRODUCTS_ARGS const unsigned char* X, const unsigned char* Y, int rowbytes, const i64* P, const i64* Q, \
    double* out
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_i8(PRODUCTS_ARGS) {
    products_out<MmaSync, int>(X, Y, rowbytes, P, Q, out);
}
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_f16(PRODUCTS_ARGS) {
    products_out<MmaSync, float>(X, Y, rowbytes, P, Q, out);
}
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_wg_i8(PRODUCTS_ARGS) {
    products_out<Wgmma, int>(X, Y, rowbytes, P, Q, out);
}
extern "C" __global__ void __launch_bounds__(THREADS) tc_products_wg_f16(PRODUCTS_ARGS) {
    products_out<Wgmma, float>(X, Y, rowbytes, P, Q, out);
}
#endif
