// Value types, arithmetic and x-load paths shared by the sparsegpu kernel families.
//
// CuPy's complex headers are not visible to nvcc in CI, so the two complex types are small
// structs laid out like numpy's complex64/complex128 (real part first).
#pragma once

struct __align__(8) complex64 {
  float re, im;
};

struct __align__(16) complex128 {
  double re, im;
};

// ---------------------------------------------------------------- arithmetic
template <typename Value>
__device__ __forceinline__ Value value_zero() {
  return Value(0);
}
template <>
__device__ __forceinline__ complex64 value_zero<complex64>() {
  return complex64{0.0f, 0.0f};
}
template <>
__device__ __forceinline__ complex128 value_zero<complex128>() {
  return complex128{0.0, 0.0};
}

// acc + a * b
__device__ __forceinline__ float multiply_add(float acc, float a, float b) {
  return fmaf(a, b, acc);
}
__device__ __forceinline__ double multiply_add(double acc, double a, double b) {
  return fma(a, b, acc);
}
__device__ __forceinline__ complex64 multiply_add(complex64 acc, complex64 a, complex64 b) {
  return complex64{fmaf(-a.im, b.im, fmaf(a.re, b.re, acc.re)),
                   fmaf(a.im, b.re, fmaf(a.re, b.im, acc.im))};
}
__device__ __forceinline__ complex128 multiply_add(complex128 acc, complex128 a, complex128 b) {
  return complex128{fma(-a.im, b.im, fma(a.re, b.re, acc.re)),
                    fma(a.im, b.re, fma(a.re, b.im, acc.im))};
}

__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ complex64 add(complex64 a, complex64 b) {
  return complex64{a.re + b.re, a.im + b.im};
}
__device__ __forceinline__ complex128 add(complex128 a, complex128 b) {
  return complex128{a.re + b.re, a.im + b.im};
}

// ---------------------------------------------------------------- warp shuffles
constexpr unsigned FULL_WARP = 0xffffffffu;

__device__ __forceinline__ float shuffle_xor(float v, int mask) {
  return __shfl_xor_sync(FULL_WARP, v, mask);
}
__device__ __forceinline__ double shuffle_xor(double v, int mask) {
  return __shfl_xor_sync(FULL_WARP, v, mask);
}
__device__ __forceinline__ complex64 shuffle_xor(complex64 v, int mask) {
  return complex64{__shfl_xor_sync(FULL_WARP, v.re, mask), __shfl_xor_sync(FULL_WARP, v.im, mask)};
}
__device__ __forceinline__ complex128 shuffle_xor(complex128 v, int mask) {
  return complex128{__shfl_xor_sync(FULL_WARP, v.re, mask),
                    __shfl_xor_sync(FULL_WARP, v.im, mask)};
}

// ---------------------------------------------------------------- x-load paths
// Template arguments of the kernels; the numbers are part of the name expressions.
constexpr int LOAD_PLAIN = 0;     // an ordinary global load (Bell & Garland's kernel)
constexpr int LOAD_TEXTURE = 1;   // tex1Dfetch on a texture object over linear memory
constexpr int LOAD_READONLY = 2;  // __ldg: the read-only data cache (seeds/000)

// __ldg: float, double, and the complex types as float2 / double2.
__device__ __forceinline__ float load_readonly(const float* p) { return __ldg(p); }
__device__ __forceinline__ double load_readonly(const double* p) { return __ldg(p); }
__device__ __forceinline__ complex64 load_readonly(const complex64* p) {
  const float2 v = __ldg(reinterpret_cast<const float2*>(p));
  return complex64{v.x, v.y};
}
__device__ __forceinline__ complex128 load_readonly(const complex128* p) {
  const double2 v = __ldg(reinterpret_cast<const double2*>(p));
  return complex128{v.x, v.y};
}

// Loads of data read once per product (the matrix's values and indices): __ldcs marks the
// lines evict-first in L1 and L2, so the streamed matrix does not push x out of the caches.
__device__ __forceinline__ int load_streaming(const int* p) { return __ldcs(p); }
__device__ __forceinline__ long long load_streaming(const long long* p) { return __ldcs(p); }
__device__ __forceinline__ float load_streaming(const float* p) { return __ldcs(p); }
__device__ __forceinline__ double load_streaming(const double* p) { return __ldcs(p); }
__device__ __forceinline__ complex64 load_streaming(const complex64* p) {
  const float2 v = __ldcs(reinterpret_cast<const float2*>(p));
  return complex64{v.x, v.y};
}
__device__ __forceinline__ complex128 load_streaming(const complex128* p) {
  const double2 v = __ldcs(reinterpret_cast<const double2*>(p));
  return complex128{v.x, v.y};
}

// Textures cannot hold 64-bit channels: double is fetched as int2, complex128 as int4.
template <typename Value>
__device__ __forceinline__ Value load_texture(cudaTextureObject_t texture, long long i);
template <>
__device__ __forceinline__ float load_texture<float>(cudaTextureObject_t texture, long long i) {
  return tex1Dfetch<float>(texture, static_cast<int>(i));
}
template <>
__device__ __forceinline__ double load_texture<double>(cudaTextureObject_t texture, long long i) {
  const int2 v = tex1Dfetch<int2>(texture, static_cast<int>(i));
  return __hiloint2double(v.y, v.x);
}
template <>
__device__ __forceinline__ complex64 load_texture<complex64>(cudaTextureObject_t texture,
                                                            long long i) {
  const float2 v = tex1Dfetch<float2>(texture, static_cast<int>(i));
  return complex64{v.x, v.y};
}
template <>
__device__ __forceinline__ complex128 load_texture<complex128>(cudaTextureObject_t texture,
                                                              long long i) {
  const int4 v = tex1Dfetch<int4>(texture, static_cast<int>(i));
  return complex128{__hiloint2double(v.y, v.x), __hiloint2double(v.w, v.z)};
}

template <int LoadPath, typename Value>
__device__ __forceinline__ Value load_x(const Value* x, cudaTextureObject_t texture, long long i) {
  if constexpr (LoadPath == LOAD_TEXTURE) {
    return load_texture<Value>(texture, i);
  } else if constexpr (LoadPath == LOAD_READONLY) {
    return load_readonly(x + i);
  } else {
    return x[i];
  }
}
