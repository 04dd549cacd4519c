// A stand-in for CUDA's runtime header: only what the stub tree's headers and the witness use.
#pragma once
#include <cstddef>

enum cudaError { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;

extern "C" {
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMallocHost(void** ptr, size_t size);
}
