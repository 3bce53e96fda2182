// Brute-force ε-join on the GPU: the matrix units' product as a filter, float64 as the judge.
//
// The driver computes G = X_a · X_b^T in float32 (cuBLAS, TF32 off) on rows shifted
// to the centre of their box.  For each element this kernel forms
//     s = |x_a|^2 + |x_b|^2 - 2 G            (float32)
// and keeps the pair as a candidate when s <= T(a, b), a threshold that exceeds eps^2
// by a proven bound on the float32 error (rounding of the inputs to float32, of the
// norms and of the dot products: see brute_gpu.py).  Every candidate is then decided
// exactly, in float64 from the stored values with dimensions summed in order
// (__dadd_rn/__dmul_rn: no FMA contraction), so no pair is lost or gained.
// Accepted pairs are appended through an atomic counter; the driver re-runs a tile
// whose output overflowed, and sorts each tile's pairs so the order is deterministic.

typedef long long i64;

extern "C" __global__ void brute_filter(
    const float* __restrict__ G, i64 rows, i64 cols, i64 r0, i64 c0,
    const float* __restrict__ na, const float* __restrict__ nb,
    const double* __restrict__ ra, const double* __restrict__ rb,
    const double* __restrict__ A, const double* __restrict__ B, int d,
    double eps_hi, double eps2, double conv, double gamma2, int selfjoin,
    unsigned long long* __restrict__ counter, i64 capacity,
    i64* __restrict__ oi, i64* __restrict__ oj, float* __restrict__ od) {
    // rows along y (grid-strided), columns along x: no 64-bit division per element
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
      const float nar = na[r];
      const double rar = ra[r];
      const i64 i = r0 + r;
      const i64 first = selfjoin ? (i + 1 - c0 > 0 ? i + 1 - c0 : 0) : 0;
      for (i64 c = first + (i64)blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += (i64)gridDim.x * blockDim.x) {
        const i64 idx = r * cols + c;
        const i64 j = c0 + c;
        const float s = nar + nb[c] - 2.0f * G[idx];
        const double norms = rar + rb[c];
        const double reach = eps_hi + conv * norms;
        const double threshold = reach * reach + gamma2 * norms * norms;
        if ((double)s > threshold) continue;
        const double* p = A + i * (i64)d;
        const double* q = B + j * (i64)d;
        double acc = 0.0;
        bool keep = true;
        for (int t = 0; t < d; ++t) {
            double u = __dsub_rn(p[t], q[t]);
            acc = __dadd_rn(acc, __dmul_rn(u, u));
            if (acc > eps2) { keep = false; break; }
        }
        if (!keep) continue;
        const unsigned long long pos = atomicAdd(counter, 1ULL);
        if ((i64)pos < capacity) {
            oi[pos] = i;
            oj[pos] = j;
            od[pos] = (float)sqrt(acc);
        }
      }
    }
}
