// The multigrid V-cycle's fused elementwise steps (sparsegpu.linalg.multigrid): the
// smoothers (weighted Jacobi and Chebyshev in D^-1 A; l1-Jacobi is Jacobi with the l1
// diagonal), the residual and the coarse correction. One device function per step, named
// as the step (`multigrid_steps::jacobi` is the arithmetic of `Steps.jacobi` in
// `linalg/multigrid/_smoothing.py`, whose NumPy branch is its host twin). Each runs inside
// a `cupy.ElementwiseKernel` whose operation is the one call of its step, as the solvers'
// steps do (`kernels/solver_steps.cu`): `T` is the vectors' value type, real or complex,
// and the scalars are host doubles, so a cycle launches back to back without waiting for
// the host and a solver's CUDA graph can hold it. O(n) work each.

namespace multigrid_steps {

// x = c D^-1 b: the first smoothing step from x = 0
template <typename T>
__device__ void scaled(T b, T dinv, double c, T& x) {
  x = (T)c * dinv * b;
}

// x += c D^-1 (b - A x): weighted (or l1-) Jacobi
template <typename T>
__device__ void jacobi(T b, T ax, T dinv, double c, T& x) {
  x += (T)c * dinv * (b - ax);
}

// r = b - A x
template <typename T>
__device__ void residual(T b, T ax, T& r) {
  r = b - ax;
}

// x += y: the coarse correction
template <typename T>
__device__ void add(T y, T& x) {
  x += y;
}

// d = c D^-1 b, x = d: Chebyshev's first step from x = 0
template <typename T>
__device__ void chebyshev_start(T b, T dinv, double c, T& d, T& x) {
  d = (T)c * dinv * b; x = d;
}

// d = a d + c D^-1 (b - A x), x += d: Chebyshev's three-term recurrence (Saad, alg. 12.1)
template <typename T>
__device__ void chebyshev(T b, T ax, T dinv, double a, double c, T& d, T& x) {
  d = (T)a * d + (T)c * dinv * (b - ax); x += d;
}

}  // namespace multigrid_steps
