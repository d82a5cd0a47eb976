// Memory-bandwidth probes of `sparsegpu probe`, after Harris, "How to Access Global Memory
// Efficiently in CUDA C/C++ Kernels" (NVIDIA developer blog, 2013): every thread adds one to one element, reading and writing it
// once. `offset_increment` shifts the element by `offset` (a misaligned start);
// `stride_increment` multiplies its position by `stride` (scattered, uncoalesced accesses).
// O(n) work, 2 * n * sizeof(T) useful bytes moved.

template <typename T>
__global__ void offset_increment(T* values, long long n, int offset) {
  long long i = static_cast<long long>(blockDim.x) * blockIdx.x + threadIdx.x;
  if (i < n) {
    values[i + offset] += T(1);
  }
}

template <typename T>
__global__ void stride_increment(T* values, long long n, int stride) {
  long long i = static_cast<long long>(blockDim.x) * blockIdx.x + threadIdx.x;
  if (i < n) {
    values[i * stride] += T(1);
  }
}

template __global__ void offset_increment<float>(float*, long long, int);
template __global__ void offset_increment<double>(double*, long long, int);
template __global__ void stride_increment<float>(float*, long long, int);
template __global__ void stride_increment<double>(double*, long long, int);
