// The 16-bit float value types of the row-group kernels (csr_vector.cu, delta16.cu): float16
// (__half) and bfloat16 (__nv_bfloat16), from CUDA's own headers.
//
// A product of 16-bit values accumulates in float: each value and x entry is widened, the
// lanes' partial sums and their reduction are floats, and y is rounded to the 16-bit type
// once, when it is written (round to nearest even). Accumulate<Value>::type names the type
// sums run in (Value itself for float, double and the complex types).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

template <typename Value>
struct Accumulate {
  using type = Value;
};
template <>
struct Accumulate<__half> {
  using type = float;
};
template <>
struct Accumulate<__nv_bfloat16> {
  using type = float;
};

template <>
__device__ __forceinline__ __half value_zero<__half>() {
  return __ushort_as_half(0);
}
template <>
__device__ __forceinline__ __nv_bfloat16 value_zero<__nv_bfloat16>() {
  return __ushort_as_bfloat16(0);
}

// acc + a * b with a and b widened to float (exact) and one rounding, as fmaf
__device__ __forceinline__ float multiply_add(float acc, __half a, __half b) {
  return fmaf(__half2float(a), __half2float(b), acc);
}
__device__ __forceinline__ float multiply_add(float acc, __nv_bfloat16 a, __nv_bfloat16 b) {
  return fmaf(__bfloat162float(a), __bfloat162float(b), acc);
}

// An accumulated sum stored as Value (rounded to nearest even for the 16-bit types)
template <typename Value>
__device__ __forceinline__ Value narrow(typename Accumulate<Value>::type sum) {
  return sum;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float sum) {
  return __float2half_rn(sum);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float sum) {
  return __float2bfloat16_rn(sum);
}
