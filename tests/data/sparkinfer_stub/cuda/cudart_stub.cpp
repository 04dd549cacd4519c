// A stand-in libcudart.so: one "device" unless STUB_CUDA_DEVICES says otherwise.
#include <cuda_runtime.h>
#include <cstdlib>

extern "C" {
cudaError_t cudaGetDeviceCount(int* count) {
    const char* e = getenv("STUB_CUDA_DEVICES");
    *count = e ? atoi(e) : 1;
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t error) { return error == cudaSuccess ? "no error" : "stub error"; }
cudaError_t cudaMallocHost(void** ptr, size_t size) {
    *ptr = malloc(size);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
}
