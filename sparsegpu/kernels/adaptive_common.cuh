// Value types for the adaptive kernel family: float, double and two small complex
// structs with just the arithmetic SpMV needs (a multiply-add and a zero), so that the
// sources compile the same under NVRTC (no CuPy or CUDA headers) and nvcc.
#pragma once

struct __align__(8) complex64_t {
    float re, im;
};

struct __align__(16) complex128_t {
    double re, im;
};

template <typename V>
__device__ __forceinline__ V value_zero() {
    return V(0);
}
template <>
__device__ __forceinline__ complex64_t value_zero<complex64_t>() {
    return complex64_t{0.0f, 0.0f};
}
template <>
__device__ __forceinline__ complex128_t value_zero<complex128_t>() {
    return complex128_t{0.0, 0.0};
}

__device__ __forceinline__ float value_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double value_mul(double a, double b) { return a * b; }
__device__ __forceinline__ complex64_t value_mul(complex64_t a, complex64_t b) {
    return complex64_t{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
__device__ __forceinline__ complex128_t value_mul(complex128_t a, complex128_t b) {
    return complex128_t{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

__device__ __forceinline__ float value_add(float a, float b) { return a + b; }
__device__ __forceinline__ double value_add(double a, double b) { return a + b; }
__device__ __forceinline__ complex64_t value_add(complex64_t a, complex64_t b) {
    return complex64_t{a.re + b.re, a.im + b.im};
}
__device__ __forceinline__ complex128_t value_add(complex128_t a, complex128_t b) {
    return complex128_t{a.re + b.re, a.im + b.im};
}

// Loads that bypass L1 (other blocks of the same launch wrote these values).
__device__ __forceinline__ float load_coherent(const float* p) { return __ldcg(p); }
__device__ __forceinline__ double load_coherent(const double* p) { return __ldcg(p); }
__device__ __forceinline__ complex64_t load_coherent(const complex64_t* p) {
    const float2 v = __ldcg(reinterpret_cast<const float2*>(p));
    return complex64_t{v.x, v.y};
}
__device__ __forceinline__ complex128_t load_coherent(const complex128_t* p) {
    const double2 v = __ldcg(reinterpret_cast<const double2*>(p));
    return complex128_t{v.x, v.y};
}

// Streaming loads (evict-first): values and indices are read once, and keeping them out of
// the way lets x stay resident in L2 for the gathers.
__device__ __forceinline__ int load_streaming(const int* p) { return __ldcs(p); }
__device__ __forceinline__ long long load_streaming(const long long* p) { return __ldcs(p); }
__device__ __forceinline__ float load_streaming(const float* p) { return __ldcs(p); }
__device__ __forceinline__ double load_streaming(const double* p) { return __ldcs(p); }
__device__ __forceinline__ complex64_t load_streaming(const complex64_t* p) {
    const float2 v = __ldcs(reinterpret_cast<const float2*>(p));
    return complex64_t{v.x, v.y};
}
__device__ __forceinline__ complex128_t load_streaming(const complex128_t* p) {
    const double2 v = __ldcs(reinterpret_cast<const double2*>(p));
    return complex128_t{v.x, v.y};
}
