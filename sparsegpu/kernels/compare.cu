// Comparisons of two device arrays reduced to one count, for the answer checks of planning
// (is a candidate's product the reference's?) and the pattern checks of re-set-up. CuPy's
// own `(a == b).all()` compiles a block reduction for each new size class of its operand
// (1-2.5 s of NVRTC each on the H200's host, benchmarks/experiments/first_call_compiles),
// so a first update of each new problem size paid 3.5-4.8 s; these compile once per type.
// Each thread tests a grid-strided share and a warp adds its count with one atomic: the
// count is exact whatever the order (integers), and only "zero or not" is read.
#include "common.cuh"

__device__ __forceinline__ double distance(float a, float b) { return fabs((double)a - b); }
__device__ __forceinline__ double distance(double a, double b) { return fabs(a - b); }
__device__ __forceinline__ double distance(complex64 a, complex64 b) {
  return hypot((double)a.re - b.re, (double)a.im - b.im);
}
__device__ __forceinline__ double distance(complex128 a, complex128 b) {
  return hypot(a.re - b.re, a.im - b.im);
}

// a != b as numpy has it (a NaN differs from everything, itself too)
template <typename T>
__device__ __forceinline__ bool unequal(T a, T b) { return a != b; }
__device__ __forceinline__ bool unequal(complex64 a, complex64 b) {
  return a.re != b.re || a.im != b.im;
}
__device__ __forceinline__ bool unequal(complex128 a, complex128 b) {
  return a.re != b.re || a.im != b.im;
}

__device__ __forceinline__ void count_warp(bool flagged, unsigned long long* count) {
  const unsigned votes = __ballot_sync(0xffffffffu, flagged);
  if ((threadIdx.x & 31) == 0 && votes) atomicAdd(count, (unsigned long long)__popc(votes));
}

// count += #{i < n : a[i] != b[i]} (indices, or any type compared bit for bit by value)
template <typename T>
__global__ void count_unequal(const T* __restrict__ a, const T* __restrict__ b, long long n,
                              unsigned long long* count) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  // every lane of a warp runs the same number of rounds (the ballot needs them all)
  for (long long base = first - (threadIdx.x & 31); base < n; base += stride) {
    const long long i = base + (threadIdx.x & 31);
    count_warp(i < n && unequal(a[i], b[i]), count);
  }
}

// count += #{i < n : not |y[i] - reference[i]| <= bound[i * bound_step]} (NaN counts)
template <typename T>
__global__ void count_outside(const T* __restrict__ y, const T* __restrict__ reference,
                              const double* __restrict__ bound, long long bound_step,
                              long long n, unsigned long long* count) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (long long base = first - (threadIdx.x & 31); base < n; base += stride) {
    const long long i = base + (threadIdx.x & 31);
    count_warp(i < n && !(distance(y[i], reference[i]) <= bound[i * bound_step]), count);
  }
}
