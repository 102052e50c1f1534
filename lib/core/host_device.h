// CNN_HD marks functions compiled for both the CPU and CUDA (pointwise math written once).
#pragma once

#if defined(__CUDACC__)
#define CNN_HD __host__ __device__ __forceinline__
#else
#define CNN_HD inline
#endif
