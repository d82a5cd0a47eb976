// GMRES's restart cycle on the device (sparsegpu.linalg.gmres): the Gram-Schmidt update,
// the Givens rotations of the Hessenberg least-squares problem, the back substitution and
// the cycle's bookkeeping, so that a whole cycle launches without reading anything back and
// can be captured as one CUDA graph (linalg/_gmres.py launches them; its HostCycleOps is the
// NumPy twin of each kernel). Every scalar lives in device memory:
//   state[ACTIVE]      the cycle's next inner iteration runs
//   state[USED]        the Krylov vectors the cycle's update takes
//   state[CONVERGED]   ||b - A x|| < tol (for good: nothing changes after it)
//   state[CYCLES]      restart cycles that ran
//   state[ITERATIONS]  inner iterations that ran
// The Hessenberg matrix is kept by columns (column j at ht + j * ldh, ldh = restart + 1), the
// Givens rotations as (c, s) pairs, c real. The one-thread kernels run <<<1, 1>>>; the vector
// kernels grid-stride over n.
#include "common.cuh"

constexpr int GMRES_BLOCK = 256;
enum GmresState { ACTIVE = 0, USED = 1, CONVERGED = 2, CYCLES = 3, ITERATIONS = 4 };

// ---------------------------------------------------------------- scalar helpers
// |a| in T's real type (numpy's abs: hypot for complex), and in double
__device__ __forceinline__ float magnitude(float a) { return fabsf(a); }
__device__ __forceinline__ double magnitude(double a) { return fabs(a); }
__device__ __forceinline__ float magnitude(complex64 a) { return hypotf(a.re, a.im); }
__device__ __forceinline__ double magnitude(complex128 a) { return hypot(a.re, a.im); }
__device__ __forceinline__ double magnitude_double(float a) { return fabs((double)a); }
__device__ __forceinline__ double magnitude_double(double a) { return fabs(a); }
__device__ __forceinline__ double magnitude_double(complex64 a) {
  return hypot((double)a.re, (double)a.im);
}
__device__ __forceinline__ double magnitude_double(complex128 a) { return hypot(a.re, a.im); }
// The real type of T (float for float and complex64): the type of its magnitude.
template <typename T>
struct RealOf {
  using type = decltype(magnitude(T{}));
};

__device__ __forceinline__ float real_hypot(float a, float b) { return hypotf(a, b); }
__device__ __forceinline__ double real_hypot(double a, double b) { return hypot(a, b); }

__device__ __forceinline__ float conjugate(float a) { return a; }
__device__ __forceinline__ double conjugate(double a) { return a; }
__device__ __forceinline__ complex64 conjugate(complex64 a) { return complex64{a.re, -a.im}; }
__device__ __forceinline__ complex128 conjugate(complex128 a) { return complex128{a.re, -a.im}; }

__device__ __forceinline__ float subtract(float a, float b) { return a - b; }
__device__ __forceinline__ double subtract(double a, double b) { return a - b; }
__device__ __forceinline__ complex64 subtract(complex64 a, complex64 b) {
  return complex64{a.re - b.re, a.im - b.im};
}
__device__ __forceinline__ complex128 subtract(complex128 a, complex128 b) {
  return complex128{a.re - b.re, a.im - b.im};
}

__device__ __forceinline__ bool is_zero(float a) { return a == 0.0f; }
__device__ __forceinline__ bool is_zero(double a) { return a == 0.0; }
__device__ __forceinline__ bool is_zero(complex64 a) { return a.re == 0.0f && a.im == 0.0f; }
__device__ __forceinline__ bool is_zero(complex128 a) { return a.re == 0.0 && a.im == 0.0; }

// a real number as T
template <typename T>
__device__ __forceinline__ T from_real(typename RealOf<T>::type v) {
  return T(v);
}
template <>
__device__ __forceinline__ complex64 from_real<complex64>(float v) {
  return complex64{v, 0.0f};
}
template <>
__device__ __forceinline__ complex128 from_real<complex128>(double v) {
  return complex128{v, 0.0};
}

// a / s and a * s for a real s (componentwise for complex, as numpy divides by s + 0j)
__device__ __forceinline__ float divide_real(float a, float s) { return a / s; }
__device__ __forceinline__ double divide_real(double a, double s) { return a / s; }
__device__ __forceinline__ complex64 divide_real(complex64 a, float s) {
  return complex64{a.re / s, a.im / s};
}
__device__ __forceinline__ complex128 divide_real(complex128 a, double s) {
  return complex128{a.re / s, a.im / s};
}
__device__ __forceinline__ float times_real(float a, float s) { return a * s; }
__device__ __forceinline__ double times_real(double a, double s) { return a * s; }
__device__ __forceinline__ complex64 times_real(complex64 a, float s) {
  return complex64{a.re * s, a.im * s};
}
__device__ __forceinline__ complex128 times_real(complex128 a, double s) {
  return complex128{a.re * s, a.im * s};
}

// a / b (complex: Smith's algorithm, as numpy divides)
__device__ __forceinline__ float divide(float a, float b) { return a / b; }
__device__ __forceinline__ double divide(double a, double b) { return a / b; }
template <typename C, typename R>
__device__ __forceinline__ C smith_divide(C a, C b) {
  if (fabs(b.re) >= fabs(b.im)) {
    R ratio = b.im / b.re;
    R d = b.re + b.im * ratio;
    return C{(a.re + a.im * ratio) / d, (a.im - a.re * ratio) / d};
  }
  R ratio = b.re / b.im;
  R d = b.re * ratio + b.im;
  return C{(a.re * ratio + a.im) / d, (a.im * ratio - a.re) / d};
}
__device__ __forceinline__ complex64 divide(complex64 a, complex64 b) {
  return smith_divide<complex64, float>(a, b);
}
__device__ __forceinline__ complex128 divide(complex128 a, complex128 b) {
  return smith_divide<complex128, double>(a, b);
}

// (c, s, rho), c real, with [[c, s], [-conj(s), c]] @ [a, b] = [rho, 0] (the host's _givens)
template <typename T>
__device__ __forceinline__ void givens_rotation(T a, T b, T& c, T& s, T& rho) {
  using R = typename RealOf<T>::type;
  if (is_zero(b)) {
    c = from_real<T>(R(1));
    s = value_zero<T>();
    rho = a;
    return;
  }
  if (is_zero(a)) {
    c = value_zero<T>();
    s = from_real<T>(R(1));
    rho = b;
    return;
  }
  const R ma = magnitude(a);
  const R scale = real_hypot(ma, magnitude(b));
  const T phase = divide_real(a, ma);
  c = from_real<T>(ma / scale);
  s = divide_real(multiply(phase, conjugate(b)), scale);
  rho = times_real(phase, scale);
}

// ---------------------------------------------------------------- vector kernels
// sum_{k < m} basis_k[i] * coef[k], in order k: entry i of a combination of the basis
template <typename T>
__device__ __forceinline__ T combination(const T* basis, long long ld, int m, const T* coef,
                                         long long i) {
  T acc = value_zero<T>();
  for (int k = 0; k < m; ++k) {
    acc = multiply_add(acc, basis[k * ld + i], coef[k]);
  }
  return acc;
}

// w -= sum_{k < m} basis_k * coef[k] (Gram-Schmidt's projection; the sum first, in order k)
template <typename T>
__global__ void __launch_bounds__(GMRES_BLOCK) gs_subtract(const T* basis, long long ld, int m,
                                                           const T* coef, T* w, long long n) {
  const long long stride = static_cast<long long>(GMRES_BLOCK) * gridDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * GMRES_BLOCK + threadIdx.x; i < n;
       i += stride) {
    const T acc = combination(basis, ld, m, coef, i);
    w[i] = subtract(w[i], acc);
  }
}

// out = sum_{k < used} basis_k * y[k] (the cycle's update), unless converged
template <typename T>
__global__ void __launch_bounds__(GMRES_BLOCK) gmres_combine(const T* basis, long long ld,
                                                             const T* y, const long long* state,
                                                             T* out, long long n) {
  if (state[CONVERGED] != 0) {
    return;
  }
  const int used = static_cast<int>(state[USED]);
  const long long stride = static_cast<long long>(GMRES_BLOCK) * gridDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * GMRES_BLOCK + threadIdx.x; i < n;
       i += stride) {
    out[i] = combination(basis, ld, used, y, i);
  }
}

// out = w / h[0] where (state[flag] != 0) == (when != 0): the next Krylov vector (flag ACTIVE,
// when 1) or the cycle's first one, r / beta (flag CONVERGED, when 0)
template <typename T>
__global__ void __launch_bounds__(GMRES_BLOCK) gmres_scale(const T* w, const double* h,
                                                           const long long* state, int flag,
                                                           int when, T* out, long long n) {
  if ((state[flag] != 0) != (when != 0)) {
    return;
  }
  using R = typename RealOf<T>::type;
  const R s = static_cast<R>(h[0]);
  const long long stride = static_cast<long long>(GMRES_BLOCK) * gridDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * GMRES_BLOCK + threadIdx.x; i < n;
       i += stride) {
    out[i] = divide_real(w[i], s);
  }
}

// x += v unless converged (the cycle's update, M-preconditioned or not)
template <typename T>
__global__ void __launch_bounds__(GMRES_BLOCK) gmres_add(const T* v, const long long* state, T* x,
                                                         long long n) {
  if (state[CONVERGED] != 0) {
    return;
  }
  const long long stride = static_cast<long long>(GMRES_BLOCK) * gridDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * GMRES_BLOCK + threadIdx.x; i < n;
       i += stride) {
    x[i] = add(x[i], v[i]);
  }
}

// r = b - r (r holding A x)
template <typename T>
__global__ void __launch_bounds__(GMRES_BLOCK) gmres_residual(const T* b, T* r, long long n) {
  const long long stride = static_cast<long long>(GMRES_BLOCK) * gridDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * GMRES_BLOCK + threadIdx.x; i < n;
       i += stride) {
    r[i] = subtract(b[i], r[i]);
  }
}

// ---------------------------------------------------------------- one-thread kernels
// Inner iteration j after Gram-Schmidt (first, second: its two passes' coefficients; ww =
// w . w): Hessenberg column j, the earlier rotations applied to it, rotation j made, g
// rotated; the residual estimate |g[j + 1]|; the cycle stops when it is below tol or the
// Krylov space is exhausted (h_{j+1,j} = 0).
template <typename T>
__global__ void arnoldi_rotate(const T* first, const T* second, const T* ww, int j, int ldh,
                               T* ht, T* givens, T* g, const double* tol, double* hnext,
                               double* estimate, long long* state) {
  if (state[ACTIVE] == 0) {
    return;
  }
  using R = typename RealOf<T>::type;
  T* h = ht + static_cast<long long>(j) * ldh;
  for (int k = 0; k <= j; ++k) {
    h[k] = add(first[k], second[k]);
  }
  const double next = sqrt(magnitude_double(ww[0]));
  h[j + 1] = from_real<T>(static_cast<R>(next));
  for (int i = 0; i < j; ++i) {
    const T c = givens[2 * i], s = givens[2 * i + 1];
    const T upper = h[i], lower = h[i + 1];
    h[i] = add(multiply(c, upper), multiply(s, lower));
    h[i + 1] = subtract(multiply(c, lower), multiply(conjugate(s), upper));
  }
  T c, s, rho;
  givens_rotation(h[j], h[j + 1], c, s, rho);
  givens[2 * j] = c;
  givens[2 * j + 1] = s;
  h[j] = rho;
  h[j + 1] = value_zero<T>();
  g[j + 1] = subtract(value_zero<T>(), multiply(conjugate(s), g[j]));
  g[j] = multiply(c, g[j]);
  state[USED] = j + 1;
  state[ITERATIONS] += 1;
  const double residual = magnitude_double(g[j + 1]);
  estimate[0] = residual;
  hnext[0] = next;
  if (residual < tol[0] || next == 0.0) {
    state[ACTIVE] = 0;
  }
}

// y = triu(H)[:used, :used] \ g[:used], unless converged; a zero pivot (a breakdown of a
// singular A) takes y = 0 in that direction, and the true residual then says whether the
// cycle converged.
template <typename T>
__global__ void back_substitute(const T* ht, int ldh, const T* g, const long long* state, T* y) {
  if (state[CONVERGED] != 0) {
    return;
  }
  const int used = static_cast<int>(state[USED]);
  for (int k = used - 1; k >= 0; --k) {
    T acc = g[k];
    for (int l = k + 1; l < used; ++l) {
      acc = subtract(acc, multiply(ht[static_cast<long long>(l) * ldh + k], y[l]));
    }
    const T pivot = ht[static_cast<long long>(k) * ldh + k];
    y[k] = is_zero(pivot) ? value_zero<T>() : divide(acc, pivot);
  }
}

// After r = b - A x (rr = r . r): count the cycle (count != 0), beta = ||r||, and either
// converged or the next cycle set up (g = [beta, ...], active, nothing used yet).
template <typename T>
__global__ void cycle_end(const T* rr, const double* tol, int count, T* g, double* beta,
                          long long* state) {
  if (state[CONVERGED] != 0) {
    return;
  }
  using R = typename RealOf<T>::type;
  if (count != 0) {
    state[CYCLES] += 1;
  }
  const double norm = sqrt(magnitude_double(rr[0]));
  beta[0] = norm;
  if (norm < tol[0]) {
    state[CONVERGED] = 1;
    state[ACTIVE] = 0;
  } else {
    g[0] = from_real<T>(static_cast<R>(norm));
    state[ACTIVE] = 1;
    state[USED] = 0;
  }
}

#define GMRES_INSTANTIATE(T)                                                                    \
  template __global__ void gs_subtract<T>(const T*, long long, int, const T*, T*, long long);   \
  template __global__ void gmres_combine<T>(const T*, long long, const T*, const long long*, T*, \
                                            long long);                                         \
  template __global__ void gmres_scale<T>(const T*, const double*, const long long*, int, int,  \
                                          T*, long long);                                       \
  template __global__ void gmres_add<T>(const T*, const long long*, T*, long long);             \
  template __global__ void gmres_residual<T>(const T*, T*, long long);                          \
  template __global__ void arnoldi_rotate<T>(const T*, const T*, const T*, int, int, T*, T*, T*, \
                                             const double*, double*, double*, long long*);      \
  template __global__ void back_substitute<T>(const T*, int, const T*, const long long*, T*);   \
  template __global__ void cycle_end<T>(const T*, const double*, int, T*, double*, long long*);

GMRES_INSTANTIATE(float)
GMRES_INSTANTIATE(double)
GMRES_INSTANTIATE(complex64)
GMRES_INSTANTIATE(complex128)
