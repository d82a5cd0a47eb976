// aggregation.cu: the row-wise steps of a smoothed-aggregation set-up
// (sparsegpu.linalg.multigrid._aggregation and _setup), one thread a row reading the row's
// entries in order: no row number per entry (CuPy's searchsorted over every entry), no
// scatter with atomics, no mask-and-compact temporaries of nnz entries, where the array
// code these replace made each of those for every level (a third of a Poisson 200^3
// set-up). The host twins are the NumPy branches of the same functions.
//
// csr_diagonal       d[i] = a_ii (zero where row i stores none), canonical CSR;
// strength_count     entries of row i kept by PyAMG's symmetric strength of connection,
//                    |a_ij|^2 >= theta^2 |a_ii| |a_jj| for j != i (magnitude[] = |a_ii|);
// strength_fill      their columns, written at the row's offset of the counts' scan;
// spread_max         out[i] = max(key[i], key[j] for the row's j): one hop of MIS-2's
//                    distance-2 search, gathered by rows (the graph is symmetric);
// jacobi_prolongator s_ij = delta_ij - scale a_ij / a_ii, the Jacobi-smoothing matrix
//                    I - omega/rho D^-1 A on A's pattern (dinv[] = 1 / a_ii).
//
// Value: float, double, complex64, complex128 (common.cuh). Index: int, long long. O(nnz)
// work each, every entry read once and the row's offsets twice.
#include "common.cuh"

__device__ __forceinline__ float magnitude2(float v) { return v * v; }
__device__ __forceinline__ double magnitude2(double v) { return v * v; }
__device__ __forceinline__ float magnitude2(complex64 v) { return v.re * v.re + v.im * v.im; }
__device__ __forceinline__ double magnitude2(complex128 v) { return v.re * v.re + v.im * v.im; }

// The real type of a value type, in which magnitudes are compared (as NumPy compares them:
// float for float and complex64, double for double and complex128)
template <typename Value>
using real_of = decltype(magnitude2(Value()));

// delta - scale * a * b (delta 1 or 0, scale real)
__device__ __forceinline__ float scaled_step(int delta, double scale, float a, float b) {
  return static_cast<float>(delta - scale * (static_cast<double>(a) * b));
}
__device__ __forceinline__ double scaled_step(int delta, double scale, double a, double b) {
  return delta - scale * (a * b);
}
__device__ __forceinline__ complex64 scaled_step(int delta, double scale, complex64 a,
                                                 complex64 b) {
  const complex64 p = multiply(a, b);
  return complex64{static_cast<float>(delta - scale * p.re), static_cast<float>(-scale * p.im)};
}
__device__ __forceinline__ complex128 scaled_step(int delta, double scale, complex128 a,
                                                  complex128 b) {
  const complex128 p = multiply(a, b);
  return complex128{delta - scale * p.re, -scale * p.im};
}

template <typename Value, typename Index>
__global__ void csr_diagonal(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                             const Value* __restrict__ data, long long n_rows,
                             Value* __restrict__ d) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    Value found = value_zero<Value>();
    for (Index j = indptr[row]; j < indptr[row + 1]; ++j) {
      if (static_cast<long long>(indices[j]) == row) {
        found = data[j];
        break;
      }
    }
    d[row] = found;
  }
}

template <typename Value, typename Index, typename Real = real_of<Value>>
__device__ __forceinline__ bool strong(long long row, Index column, Value value,
                                       const Real* __restrict__ magnitude, Real theta2) {
  return static_cast<long long>(column) != row &&
         magnitude2(value) >= theta2 * magnitude[row] * magnitude[column];
}

template <typename Value, typename Index>
__global__ void strength_count(const Index* __restrict__ indptr,
                               const Index* __restrict__ indices,
                               const Value* __restrict__ data,
                               const real_of<Value>* __restrict__ magnitude,
                               real_of<Value> theta2, long long n_rows,
                               Index* __restrict__ counts) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    Index kept = 0;
    for (Index j = indptr[row]; j < indptr[row + 1]; ++j) {
      kept += strong(row, indices[j], data[j], magnitude, theta2);
    }
    counts[row] = kept;
  }
}

template <typename Value, typename Index>
__global__ void strength_fill(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                              const Value* __restrict__ data,
                              const real_of<Value>* __restrict__ magnitude,
                              real_of<Value> theta2, long long n_rows,
                              const Index* __restrict__ out_indptr,
                              Index* __restrict__ out_indices) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    Index at = out_indptr[row];
    for (Index j = indptr[row]; j < indptr[row + 1]; ++j) {
      const Index column = indices[j];
      if (strong(row, column, data[j], magnitude, theta2)) {
        out_indices[at++] = column;
      }
    }
  }
}

template <typename Index>
__global__ void spread_max(const Index* __restrict__ indptr, const Index* __restrict__ indices,
                           const unsigned long long* __restrict__ key, long long n_rows,
                           unsigned long long* __restrict__ out) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    unsigned long long most = key[row];
    for (Index j = indptr[row]; j < indptr[row + 1]; ++j) {
      const unsigned long long k = key[indices[j]];
      most = k > most ? k : most;
    }
    out[row] = most;
  }
}

template <typename Value, typename Index>
__global__ void jacobi_prolongator(const Index* __restrict__ indptr,
                                   const Index* __restrict__ indices,
                                   const Value* __restrict__ data, const Value* __restrict__ dinv,
                                   double scale, long long n_rows, Value* __restrict__ out) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       row < n_rows; row += stride) {
    const Value inverse = dinv[row];
    for (Index j = indptr[row]; j < indptr[row + 1]; ++j) {
      out[j] = scaled_step(static_cast<long long>(indices[j]) == row, scale, data[j], inverse);
    }
  }
}
