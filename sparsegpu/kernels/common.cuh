// The one kernel types header: value types, offsets, arithmetic and load helpers of every
// kernel family (csr_vector, swcache, merge_path, csr_spmm).
//
// CuPy's complex headers are not visible to nvcc in CI, so the two complex types are small
// structs laid out like numpy's complex64/complex128 (real part first). Every kernel forms
// a product with multiply_add, so a complex product is rounded the same way everywhere.
#pragma once

struct __align__(8) complex64 {
  float re, im;
};

struct __align__(16) complex128 {
  double re, im;
};

// ---------------------------------------------------------------- offsets
// Offsets into indices/data (the row-group kernels, the block kernel): 32-bit arithmetic for
// int32 matrices (fewer registers, so more loads stay in flight), unsigned so that a lane's
// j + UNROLL * (lanes of its row) cannot overflow it (nnz < 2^31 there); 64-bit matrices
// keep signed 64-bit offsets.
template <typename Index>
struct OffsetOf;
template <>
struct OffsetOf<int> {
  using type = unsigned int;
};
template <>
struct OffsetOf<long long> {
  using type = long long;
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

// every entry of `values` zero
template <typename Value, int N>
__device__ __forceinline__ void set_zero(Value (&values)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    values[i] = value_zero<Value>();
  }
}

// acc + a * b
__device__ __forceinline__ float multiply_add(float acc, float a, float b) {
  return fmaf(a, b, acc);
}
__device__ __forceinline__ double multiply_add(double acc, double a, double b) {
  return fma(a, b, acc);
}
// complex: the a.im * b.im and a.im * b.re terms are added first, the a.re terms last
__device__ __forceinline__ complex64 multiply_add(complex64 acc, complex64 a, complex64 b) {
  return complex64{fmaf(a.re, b.re, fmaf(-a.im, b.im, acc.re)),
                   fmaf(a.re, b.im, fmaf(a.im, b.re, acc.im))};
}
__device__ __forceinline__ complex128 multiply_add(complex128 acc, complex128 a, complex128 b) {
  return complex128{fma(a.re, b.re, fma(-a.im, b.im, acc.re)),
                    fma(a.re, b.im, fma(a.im, b.re, acc.im))};
}

// mixed precision: a float value widened (exactly) to double, then as the double product
// (an exact match, so that overload resolution never weighs float against double)
__device__ __forceinline__ double multiply_add(double acc, float a, double b) {
  return fma(static_cast<double>(a), b, acc);
}

// a * b, rounded as multiply_add(zero, a, b) rounds it (without adding the zero)
__device__ __forceinline__ float multiply(float a, float b) { return a * b; }
__device__ __forceinline__ double multiply(double a, double b) { return a * b; }
__device__ __forceinline__ complex64 multiply(complex64 a, complex64 b) {
  return complex64{fmaf(a.re, b.re, -a.im * b.im), fmaf(a.re, b.im, a.im * b.re)};
}
__device__ __forceinline__ complex128 multiply(complex128 a, complex128 b) {
  return complex128{fma(a.re, b.re, -a.im * b.im), fma(a.re, b.im, a.im * b.re)};
}

__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ complex64 add(complex64 a, complex64 b) {
  return complex64{a.re + b.re, a.im + b.im};
}
__device__ __forceinline__ complex128 add(complex128 a, complex128 b) {
  return complex128{a.re + b.re, a.im + b.im};
}

// *p += v by atomics (a complex value as its two parts: each part's sum is atomic)
__device__ __forceinline__ void atomic_add_value(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_value(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_value(complex64* p, complex64 v) {
  atomicAdd(&p->re, v.re);
  atomicAdd(&p->im, v.im);
}
__device__ __forceinline__ void atomic_add_value(complex128* p, complex128 v) {
  atomicAdd(&p->re, v.re);
  atomicAdd(&p->im, v.im);
}

// Values in one 16-byte tile of a row of a row-major dense matrix (the SpMM kernels load X's
// rows a tile at a time): four floats, two doubles or complex64, one complex128.
template <typename Value>
__host__ __device__ constexpr int tile_width() {
  return sizeof(Value) >= 16 ? 1 : static_cast<int>(16 / sizeof(Value));
}

// ---------------------------------------------------------------- warp shuffles
constexpr unsigned FULL_WARP = 0xffffffffu;

// v of the lane offset lanes away (lane ^ offset) among `lanes`, within groups of `width`
__device__ __forceinline__ float shuffle_xor(float v, int offset, unsigned lanes = FULL_WARP,
                                             int width = 32) {
  return __shfl_xor_sync(lanes, v, offset, width);
}
__device__ __forceinline__ double shuffle_xor(double v, int offset, unsigned lanes = FULL_WARP,
                                              int width = 32) {
  return __shfl_xor_sync(lanes, v, offset, width);
}
__device__ __forceinline__ complex64 shuffle_xor(complex64 v, int offset,
                                                 unsigned lanes = FULL_WARP, int width = 32) {
  return complex64{__shfl_xor_sync(lanes, v.re, offset, width),
                   __shfl_xor_sync(lanes, v.im, offset, width)};
}
__device__ __forceinline__ complex128 shuffle_xor(complex128 v, int offset,
                                                  unsigned lanes = FULL_WARP, int width = 32) {
  return complex128{__shfl_xor_sync(lanes, v.re, offset, width),
                    __shfl_xor_sync(lanes, v.im, offset, width)};
}

// v of lane `source` of this thread's group of `width` lanes (__shfl_sync; the complex
// types part by part)
template <typename T>
__device__ __forceinline__ T shuffle_from(T v, int source, unsigned lanes = FULL_WARP,
                                          int width = 32) {
  return __shfl_sync(lanes, v, source, width);
}
template <>
__device__ __forceinline__ complex64 shuffle_from(complex64 v, int source, unsigned lanes,
                                                  int width) {
  return complex64{__shfl_sync(lanes, v.re, source, width),
                   __shfl_sync(lanes, v.im, source, width)};
}
template <>
__device__ __forceinline__ complex128 shuffle_from(complex128 v, int source, unsigned lanes,
                                                   int width) {
  return complex128{__shfl_sync(lanes, v.re, source, width),
                    __shfl_sync(lanes, v.im, source, width)};
}

// ---------------------------------------------------------------- x-load paths
// Template arguments of the kernels; the numbers are part of the name expressions.
constexpr int LOAD_PLAIN = 0;     // an ordinary global load (Bell & Garland's kernel)
constexpr int LOAD_TEXTURE = 1;   // tex1Dfetch on a texture object over linear memory
constexpr int LOAD_READONLY = 2;  // __ldg: the read-only data cache

// Cache-hinted loads of a value or index. The complex types load as float2 / double2 (one
// 8- or 16-byte load); the hint says which caches keep the line:
//   load_readonly   __ldg: through the read-only data cache (x, read many times)
//   load_streaming  __ldcs: evict-first in L1 and L2, for what a product reads once (the
//                   matrix's values and indices), so that it does not push x out
//   load_coherent   __ldcg: L2 only, for values other blocks of the same launch wrote
// and HINT_PLAIN, an ordinary load (the compiler's choice).
constexpr int HINT_READONLY = 0;
constexpr int HINT_STREAMING = 1;
constexpr int HINT_COHERENT = 2;
constexpr int HINT_PLAIN = 3;

template <int Hint, typename T>
__device__ __forceinline__ T load_hinted(const T* p) {
  if constexpr (Hint == HINT_READONLY) {
    return __ldg(p);
  } else if constexpr (Hint == HINT_STREAMING) {
    return __ldcs(p);
  } else if constexpr (Hint == HINT_COHERENT) {
    return __ldcg(p);
  } else {
    return *p;
  }
}
template <int Hint>
__device__ __forceinline__ complex64 load_hinted(const complex64* p) {
  const float2 v = load_hinted<Hint>(reinterpret_cast<const float2*>(p));
  return complex64{v.x, v.y};
}
template <int Hint>
__device__ __forceinline__ complex128 load_hinted(const complex128* p) {
  const double2 v = load_hinted<Hint>(reinterpret_cast<const double2*>(p));
  return complex128{v.x, v.y};
}

template <typename T>
__device__ __forceinline__ T load_readonly(const T* p) {
  return load_hinted<HINT_READONLY>(p);
}
template <typename T>
__device__ __forceinline__ T load_streaming(const T* p) {
  return load_hinted<HINT_STREAMING>(p);
}
template <typename T>
__device__ __forceinline__ T load_coherent(const T* p) {
  return load_hinted<HINT_COHERENT>(p);
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

// N values as loads of one Chunk type (int4: 16 bytes, int2: 8), each with the cache hint
// Hint (HINT_*), copied into out: load_chunks's two wide cases.
template <int Hint, typename Chunk, typename T, int N>
__device__ __forceinline__ void load_as_chunks(const T* p, T (&out)[N]) {
  constexpr int BYTES = N * static_cast<int>(sizeof(T));
  constexpr int CHUNKS = BYTES / static_cast<int>(sizeof(Chunk));
  const Chunk* src = reinterpret_cast<const Chunk*>(p);
  Chunk chunk[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    chunk[c] = load_hinted<Hint>(src + c);
  }
  memcpy(out, chunk, BYTES);
}

// N consecutive values from an address aligned to the largest power of two (at most 16
// bytes) that divides their size, in as few loads as that allows: 16-byte loads where they
// are whole 16-byte chunks, 8-byte ones where they are whole 8-byte chunks, else value by
// value, each load with the cache hint Hint (HINT_*). A 3 x 3 float64 block: nine 8-byte
// loads; four int32 indices: one 16-byte load.
template <int Hint, typename T, int N>
__device__ __forceinline__ void load_chunks(const T* p, T (&out)[N]) {
  constexpr int BYTES = N * static_cast<int>(sizeof(T));
  if constexpr (BYTES % 16 == 0) {
    load_as_chunks<Hint, int4>(p, out);
  } else if constexpr (BYTES % 8 == 0) {
    load_as_chunks<Hint, int2>(p, out);
  } else {
#pragma unroll
    for (int v = 0; v < N; ++v) {
      out[v] = load_hinted<Hint>(p + v);
    }
  }
}

// Four consecutive entries from an address aligned to their size (4 * sizeof(T), at least 8
// bytes) as 8- or 16-byte loads: one int2 of uint16 column offsets, one int4 of int32
// indices or floats, two of int64 or doubles, up to four of complex128. Streaming: evict-first
// (__ldcs), as load_streaming; else ordinary loads.
template <bool Streaming, typename T>
__device__ __forceinline__ void load_quad(const T* p, T (&out)[4]) {
  static_assert((4 * sizeof(T)) % 8 == 0, "a quad is whole 8-byte chunks");
  load_chunks<Streaming ? HINT_STREAMING : HINT_PLAIN>(p, out);
}
