// ε-grid join on the GPU (Gowanlock & Karsin; Gallet & Gowanlock), exact.
//
// The index (built by the Python driver with CuPy sorts) holds the points sorted by
// linear cell id and, inside a cell, by the last indexed coordinate; the non-empty
// cells (ids + first point) and, on dense grids, a table from cell id to first point.
//
// One *item* is (query point, lane): `tpp` threads share a query point and split its
// neighbour rows round-robin (k threads per point).  Items are taken in `order`
// (identity, or sorted by workload), either by position or from a work queue (an
// atomic counter).  The self-join searches each pair of neighbour cells from one side
// only, so every distance is computed once: `selfjoin` 1, from the lower linear id
// (LID-UNICOMP); 2, from the cell whose coordinate is odd in the first dimension where
// the two differ (UNICOMP; see kernels/grid.py).  Per point, a row is skipped when the point is
// farther than eps from it, and the row's end cells are scanned only while in reach.
//
// The decision is the library's exact one: float64, dimensions summed in order,
// with __dadd_rn/__dmul_rn so that no FMA contraction changes the rounding.
//
// mode 0: count pairs per item; mode 1: write pairs at offsets[item];
// mode 2: count candidates per item (the workload estimate, no distances).
// Compiles under nvcc and NVRTC: extern "C", no host headers.

#define MAXK 8

typedef long long i64;

__device__ __forceinline__ i64 first_at(i64 lid, const i64* __restrict__ dense, i64 ndense,
                                        const i64* __restrict__ cell_ids, const i64* __restrict__ cell_start,
                                        i64 ncell) {
    if (ndense > 0) return dense[lid];
    i64 lo = 0, hi = ncell;
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (cell_ids[mid] < lid) lo = mid + 1; else hi = mid;
    }
    return cell_start[lo];
}

__device__ __forceinline__ double exact_d2(const double* __restrict__ p, const double* __restrict__ q, int d,
                                           double eps2) {
    double s = 0.0;
    for (int t = 0; t < d; ++t) {
        double u = __dsub_rn(p[t], q[t]);
        s = __dadd_rn(s, __dmul_rn(u, u));
        if (s > eps2) return -1.0;
    }
    return s;
}

struct Emit {
    int mode;
    int selfjoin;
    i64 count;
    i64 at;
    i64 pa;
    const i64* dperm;
    i64* oi;
    i64* oj;
    float* od;
};

__device__ __forceinline__ void emit(Emit& e, i64 b, double d2) {
    if (e.mode == 1) {
        i64 pb = e.dperm[b];
        i64 x = e.pa, y = pb;
        if (e.selfjoin && y < x) { i64 t = x; x = y; y = t; }
        e.oi[e.at + e.count] = x;
        e.oj[e.at + e.count] = y;
        e.od[e.at + e.count] = (float)sqrt(d2);
    }
    e.count += 1;
}

// Scan from `from` to `to` (exclusive) by `step`: forwards over [from, to), or (step -1) downwards from
// `from` to `to` + 1; when `check`, stop once the last indexed coordinate is out of reach.
__device__ __forceinline__ void scan(Emit& e, const double* __restrict__ pa, const double* __restrict__ dpts,
                                     i64 from, i64 to, int step, int check, int last_dim, double xa,
                                     double reach2, int d, double eps2) {
    for (i64 b = from; b != to; b += step) {
        const double* pb = dpts + b * (i64)d;
        if (check) {
            double gap = pb[last_dim] - xa;
            if (gap * gap > reach2) break;
        }
        if (e.mode == 2) { e.count += 1; continue; }
        double d2 = exact_d2(pa, pb, d, eps2);
        if (d2 >= 0.0) emit(e, b, d2);
    }
}

extern "C" __global__ void grid_join(
    const double* __restrict__ qpts, const i64* __restrict__ qperm, const i64* __restrict__ qcell, i64 nq,
    const double* __restrict__ dpts, const i64* __restrict__ dperm, i64 nd,
    const i64* __restrict__ cell_ids, const i64* __restrict__ cell_start, i64 ncell,
    const i64* __restrict__ dense, i64 ndense,
    int d, int k, const int* __restrict__ dims, const double* __restrict__ origin,
    const double* __restrict__ widths, const i64* __restrict__ ncells, const i64* __restrict__ strides,
    const double* __restrict__ slack, double eps2, int selfjoin, int tpp,
    const i64* __restrict__ order, unsigned long long* queue, int use_queue,
    int mode, int* __restrict__ counts, const i64* __restrict__ offsets,
    i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od, i64 item_lo, i64 item_hi) {
    // items [item_lo, item_hi) of nq * tpp; counts/offsets are indexed by item - item_lo
    const i64 nitems = item_hi;
    i64 item;
    if (use_queue) {
        item = 0;  // fetched below (the queue counter starts at item_lo)
    } else {
        item = item_lo + (i64)blockIdx.x * blockDim.x + threadIdx.x;
    }
    const int lane = threadIdx.x & 31;
    int nprefix = 1;
    for (int m = 0; m + 1 < k; ++m) nprefix *= 3;
    while (true) {
        if (use_queue) {
            unsigned long long base = 0;
            if (lane == 0) base = atomicAdd(queue, 32ULL);
            base = __shfl_sync(0xffffffffu, base, 0);
            item = (i64)base + lane;
            if ((i64)base >= nitems) break;
        }
        if (item < nitems) {
            const i64 a = order[item / tpp];
            const int t = (int)(item % tpp);
            const double* pa = qpts + a * (i64)d;
            Emit e;
            e.mode = mode; e.selfjoin = selfjoin; e.count = 0; e.at = (mode == 1) ? offsets[item - item_lo] : 0;
            e.pa = qperm[a]; e.dperm = dperm; e.oi = oi; e.oj = oj; e.od = od;
            if (k == 0) {
                // one cell holds everything
                if (t == 0) scan(e, pa, dpts, selfjoin ? a + 1 : 0, nd, 1, 0, 0, 0.0, 0.0, d, eps2);
            } else {
                const i64 lid = qcell[a];
                i64 coords[MAXK];
                double gl[MAXK], gu[MAXK];
#pragma unroll
                for (int m = 0; m < MAXK; ++m) {
                    if (m < k) {
                        coords[m] = (lid / strides[m]) % ncells[m];
                        double lower = origin[m] + (double)coords[m] * widths[m];
                        double x = pa[dims[m]];
                        double g = x - lower - slack[m];
                        gl[m] = g > 0.0 ? g * g : 0.0;
                        g = lower + widths[m] - x - slack[m];
                        gu[m] = g > 0.0 ? g * g : 0.0;
                    } else {
                        coords[m] = 0; gl[m] = 0.0; gu[m] = 0.0;
                    }
                }
                const int km = k - 1;
                i64 last = (lid / strides[km]) % ncells[km];
                const i64 nlast = ncells[km];
                const int last_dim = dims[km];
                const double slack_last = slack[km];
                double gl_last, gu_last;
                {
                    double lower = origin[km] + (double)last * widths[km];
                    double x = pa[last_dim];
                    double g = x - lower - slack_last;
                    gl_last = g > 0.0 ? g * g : 0.0;
                    g = lower + widths[km] - x - slack_last;
                    gu_last = g > 0.0 ? g * g : 0.0;
                }
                const double xa = pa[last_dim];
                const double slack2 = slack_last * slack_last + 1e-9 * eps2;
                if (selfjoin && t == 0) {
                    // own row: later points of the own cell, then the last-dimension neighbours
                    // this cell searches (LID-UNICOMP: the next; UNICOMP: both where `last` is odd)
                    i64 e_own = first_at(lid + 1, dense, ndense, cell_ids, cell_start, ncell);
                    scan(e, pa, dpts, a + 1, e_own, 1, 0, last_dim, xa, 0.0, d, eps2);
                    const bool sides = selfjoin == 1 || (last & 1);
                    if (sides && last + 1 < nlast && gu_last <= eps2) {
                        i64 e_next = first_at(lid + 2, dense, ndense, cell_ids, cell_start, ncell);
                        scan(e, pa, dpts, e_own, e_next, 1, 1, last_dim, xa, eps2 + slack2, d, eps2);
                    }
                    if (selfjoin == 2 && sides && last > 0 && gl_last <= eps2) {
                        i64 s_own = first_at(lid, dense, ndense, cell_ids, cell_start, ncell);
                        i64 s_prev = first_at(lid - 1, dense, ndense, cell_ids, cell_start, ncell);
                        scan(e, pa, dpts, s_own - 1, s_prev - 1, -1, 1, last_dim, xa, eps2 + slack2, d, eps2);
                    }
                }
                for (int code = t; code < nprefix; code += tpp) {
                    int rest = code;
                    i64 base = lid;
                    bool valid = true;
                    int first_nonzero = 0;
                    int first_odd = 0;  // the cell's coordinate is odd where the offset is first non-zero
                    double g = 0.0;
#pragma unroll
                    for (int m = 0; m < MAXK - 1; ++m) {
                        if (m < k - 1) {
                            int off = rest % 3 - 1;
                            rest /= 3;
                            i64 c = coords[m] + off;
                            if (c < 0 || c >= ncells[m]) valid = false;
                            if (first_nonzero == 0 && off != 0) {
                                first_nonzero = off;
                                first_odd = (int)(coords[m] & 1);
                            }
                            if (off < 0) g += gl[m]; else if (off > 0) g += gu[m];
                            base += (i64)off * strides[m];
                        }
                    }
                    if (!valid || g > eps2) continue;
                    if (selfjoin == 1 && first_nonzero <= 0) continue;
                    if (selfjoin == 2 && !first_odd) continue;
                    const i64 mid0 = first_at(base, dense, ndense, cell_ids, cell_start, ncell);
                    const i64 mid1 = first_at(base + 1, dense, ndense, cell_ids, cell_start, ncell);
                    const double reach2 = (eps2 - g) + slack2;
                    scan(e, pa, dpts, mid0, mid1, 1, 0, last_dim, xa, reach2, d, eps2);
                    if (last > 0 && g + gl_last <= eps2) {
                        i64 lo = first_at(base - 1, dense, ndense, cell_ids, cell_start, ncell);
                        // downwards: gap is xa - x_b, the same square
                        scan(e, pa, dpts, mid0 - 1, lo - 1, -1, 1, last_dim, xa, reach2, d, eps2);
                    }
                    if (last + 1 < nlast && g + gu_last <= eps2) {
                        i64 hi = first_at(base + 2, dense, ndense, cell_ids, cell_start, ncell);
                        scan(e, pa, dpts, mid1, hi, 1, 1, last_dim, xa, reach2, d, eps2);
                    }
                }
            }
            if (mode != 1) counts[item - item_lo] = (int)e.count;
        }
        if (!use_queue) break;
    }
}
