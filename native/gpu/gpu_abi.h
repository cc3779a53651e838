// The parts of the CUDA runtime's and NCCL's binary interfaces the NCCL data plane calls. Both
// libraries are opened at run time (gpu_library.h), so the core builds and imports on machines
// without CUDA or NCCL; these declarations stand in for their headers. A build that finds the real
// headers (setup.py defines HS_CHECK_GPU_ABI) checks every value here against them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hs::gpu {

// CUDA runtime
using cudaError = int;
constexpr cudaError kCudaSuccess = 0;
constexpr cudaError kCudaErrorNotReady = 600;
using cudaStream = void*;  // cudaStream_t: 0 is the legacy default stream
using cudaEvent = void*;   // cudaEvent_t
constexpr unsigned kCudaStreamNonBlocking = 0x01;
constexpr unsigned kCudaEventDisableTiming = 0x02;

// NCCL
using ncclResult = int;
constexpr ncclResult kNcclSuccess = 0;
constexpr ncclResult kNcclInProgress = 7;
constexpr size_t kNcclUniqueIdBytes = 128;
struct ncclUniqueId {
  char internal[kNcclUniqueIdBytes];
};
using ncclComm = void*;  // ncclComm_t
using ncclDataType = int;
constexpr ncclDataType kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclInt64 = 4, kNcclFloat16 = 6,
                       kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9;
using ncclRedOp = int;
constexpr ncclRedOp kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4;
constexpr int kNcclScalarHostImmediate = 1;

}  // namespace hs::gpu

#ifdef HS_CHECK_GPU_ABI
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <type_traits>
namespace hs::gpu {
static_assert(kCudaSuccess == cudaSuccess && kCudaErrorNotReady == cudaErrorNotReady);
static_assert(kCudaStreamNonBlocking == cudaStreamNonBlocking && kCudaEventDisableTiming == cudaEventDisableTiming);
static_assert(sizeof(cudaError) == sizeof(cudaError_t) && sizeof(cudaStream) == sizeof(cudaStream_t));
static_assert(kNcclSuccess == ncclSuccess && kNcclInProgress == ncclInProgress);
static_assert(sizeof(ncclUniqueId) == sizeof(::ncclUniqueId) && kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(ncclResult) == sizeof(ncclResult_t) && sizeof(ncclDataType) == sizeof(ncclDataType_t));
static_assert(sizeof(ncclRedOp) == sizeof(ncclRedOp_t) && sizeof(ncclComm) == sizeof(ncclComm_t));
static_assert(kNcclInt8 == ncclInt8 && kNcclUint8 == ncclUint8 && kNcclInt32 == ncclInt32 && kNcclInt64 == ncclInt64);
static_assert(kNcclFloat16 == ncclFloat16 && kNcclFloat32 == ncclFloat32 && kNcclFloat64 == ncclFloat64 &&
              kNcclBfloat16 == ncclBfloat16);
static_assert(kNcclSum == ncclSum && kNcclProd == ncclProd && kNcclMax == ncclMax && kNcclMin == ncclMin &&
              kNcclAvg == ncclAvg);
static_assert(kNcclScalarHostImmediate == ncclScalarHostImmediate);
}  // namespace hs::gpu
#endif
