// lanczos.cu: the Lanczos steps of multigrid's spectral-radius estimate
// (sparsegpu.linalg.multigrid._smoothing.spectral_radius) on K = D^-1/2 A D^-1/2, with the
// step's two inner products reduced by the kernels themselves: each block writes the sum of
// its part of the vectors (`parts[block]`), and the next kernel, launched on the same grid,
// sums those parts in every block in one fixed order, so a step is the product and three
// launches, never waits for the host, and gives the same coefficients on every run.
//
// With y = A u, u = d v (d = D^-1/2):
// lanczos_alpha      parts: Re(u^H y), whose sum is alpha_k = v^H K v;
// lanczos_recurrence alpha_k summed (block 0 keeps it in alphas[k]), then
//                    w = d y - alpha_k v - beta_k p (beta_k = betas[k], 0 at k = 0) and
//                    parts: |w|^2;
// lanczos_advance    beta_{k+1} = sqrt(sum of the parts) (block 0 keeps it in betas[k+1]),
//                    p = v, v = w / beta_{k+1} (w itself once it is 0: the Krylov space has
//                    ended), u = d v: the next product's input.
//
// Value T: float, double, complex64, complex128 (common.cuh); the coefficients and d are
// of its real type. O(n) work each; blockDim.x a multiple of 32, at most 1,024.
#include "common.cuh"

__device__ __forceinline__ float re_dot(float a, float b) { return a * b; }
__device__ __forceinline__ double re_dot(double a, double b) { return a * b; }
__device__ __forceinline__ float re_dot(complex64 a, complex64 b) {
  return a.re * b.re + a.im * b.im;
}
__device__ __forceinline__ double re_dot(complex128 a, complex128 b) {
  return a.re * b.re + a.im * b.im;
}

// the real type of a value type (float for float and complex64, double for the others)
template <typename T>
using real_t = decltype(re_dot(T(), T()));

// s * a + b * c + e * f, each of the real scalars s, b, e times a value
__device__ __forceinline__ float combine(float s, float a, float b, float c, float e, float f) {
  return s * a + b * c + e * f;
}
__device__ __forceinline__ double combine(double s, double a, double b, double c, double e,
                                          double f) {
  return s * a + b * c + e * f;
}
__device__ __forceinline__ complex64 combine(float s, complex64 a, float b, complex64 c, float e,
                                             complex64 f) {
  return complex64{s * a.re + b * c.re + e * f.re, s * a.im + b * c.im + e * f.im};
}
__device__ __forceinline__ complex128 combine(double s, complex128 a, double b, complex128 c,
                                              double e, complex128 f) {
  return complex128{s * a.re + b * c.re + e * f.re, s * a.im + b * c.im + e * f.im};
}

__device__ __forceinline__ float scaled(float s, float a) { return s * a; }
__device__ __forceinline__ double scaled(double s, double a) { return s * a; }
__device__ __forceinline__ complex64 scaled(float s, complex64 a) {
  return complex64{s * a.re, s * a.im};
}
__device__ __forceinline__ complex128 scaled(double s, complex128 a) {
  return complex128{s * a.re, s * a.im};
}

// The block's sum of every thread's x, in every thread (a fixed order: the same sum for
// the same inputs). `shared`: 32 of the real type.
template <typename R>
__device__ __forceinline__ R block_sum(R x, R* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    x += __shfl_down_sync(FULL_WARP, x, offset);
  }
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  __syncthreads();  // shared free again (a sum before this one may still read it)
  if ((threadIdx.x & 31) == 0) {
    shared[warp] = x;
  }
  __syncthreads();
  R total = 0;
  for (int i = 0; i < warps; ++i) {
    total += shared[i];
  }
  return total;
}

// The sum of `count` parts, in every thread of the block (the same in every block).
template <typename R>
__device__ __forceinline__ R sum_parts(const R* __restrict__ parts, int count, R* shared) {
  R x = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    x += parts[i];
  }
  return block_sum(x, shared);
}

template <typename T>
__global__ void lanczos_alpha(const T* __restrict__ u, const T* __restrict__ y, long long n,
                              real_t<T>* __restrict__ parts) {
  using R = real_t<T>;
  __shared__ R shared[32];
  R x = 0;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    x += re_dot(u[i], y[i]);
  }
  x = block_sum(x, shared);
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = x;
  }
}

template <typename T>
__global__ void lanczos_recurrence(const T* __restrict__ y, const real_t<T>* __restrict__ d,
                                   const T* __restrict__ v, const T* __restrict__ p,
                                   const real_t<T>* __restrict__ alpha_parts,
                                   real_t<T>* __restrict__ alphas,
                                   const real_t<T>* __restrict__ betas, long long k, long long n,
                                   T* __restrict__ w, real_t<T>* __restrict__ parts) {
  using R = real_t<T>;
  __shared__ R shared[32];
  const R alpha = sum_parts(alpha_parts, gridDim.x, shared);
  const R beta = betas[k];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    alphas[k] = alpha;
  }
  R x = 0;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const T value = combine(d[i], y[i], -alpha, v[i], -beta, p[i]);
    w[i] = value;
    x += re_dot(value, value);
  }
  x = block_sum(x, shared);
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = x;
  }
}

template <typename T>
__global__ void lanczos_advance(const T* __restrict__ w, const real_t<T>* __restrict__ d,
                                const real_t<T>* __restrict__ parts,
                                real_t<T>* __restrict__ betas, long long k, long long n,
                                T* __restrict__ p, T* __restrict__ v, T* __restrict__ u) {
  using R = real_t<T>;
  __shared__ R shared[32];
  const R beta = sqrt(sum_parts(parts, gridDim.x, shared));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    betas[k + 1] = beta;
  }
  const R inverse = beta == R(0) ? R(1) : R(1) / beta;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const T next = scaled(inverse, w[i]);
    p[i] = v[i];
    v[i] = next;
    u[i] = scaled(d[i], next);
  }
}
