// libcudart and libnccl, opened at run time for the NCCL data plane. Nothing here is needed to
// build or import the core: without the libraries or a GPU, load() returns the reason and the fix,
// and collectives on device memory are not offered (the frameworks stage through host memory).
#pragma once
#include <string>
#include <vector>

#include "gpu/gpu_abi.h"

namespace hs::gpu {

struct GpuLibrary {
  // CUDA runtime
  cudaError (*GetDeviceCount)(int*) = nullptr;
  cudaError (*GetDevice)(int*) = nullptr;
  cudaError (*SetDevice)(int) = nullptr;
  cudaError (*StreamCreateWithFlags)(cudaStream*, unsigned) = nullptr;
  cudaError (*StreamDestroy)(cudaStream) = nullptr;
  cudaError (*EventCreateWithFlags)(cudaEvent*, unsigned) = nullptr;
  cudaError (*EventDestroy)(cudaEvent) = nullptr;
  cudaError (*EventRecord)(cudaEvent, cudaStream) = nullptr;
  cudaError (*EventQuery)(cudaEvent) = nullptr;
  cudaError (*StreamWaitEvent)(cudaStream, cudaEvent, unsigned) = nullptr;
  cudaError (*DeviceGetPCIBusId)(char*, int, int) = nullptr;
  const char* (*GetErrorString)(cudaError) = nullptr;
  // NCCL
  ncclResult (*GetVersion)(int*) = nullptr;
  ncclResult (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult (*CommInitRank)(ncclComm*, int, ncclUniqueId, int) = nullptr;
  ncclResult (*CommDestroy)(ncclComm) = nullptr;
  ncclResult (*CommAbort)(ncclComm) = nullptr;
  ncclResult (*CommGetAsyncError)(ncclComm, ncclResult*) = nullptr;
  ncclResult (*AllReduce)(const void*, void*, size_t, ncclDataType, ncclRedOp, ncclComm, cudaStream) = nullptr;
  ncclResult (*Broadcast)(const void*, void*, size_t, ncclDataType, int, ncclComm, cudaStream) = nullptr;
  ncclResult (*Reduce)(const void*, void*, size_t, ncclDataType, ncclRedOp, int, ncclComm, cudaStream) = nullptr;
  ncclResult (*AllGather)(const void*, void*, size_t, ncclDataType, ncclComm, cudaStream) = nullptr;
  ncclResult (*ReduceScatter)(const void*, void*, size_t, ncclDataType, ncclRedOp, ncclComm, cudaStream) = nullptr;
  ncclResult (*Send)(const void*, size_t, ncclDataType, int, ncclComm, cudaStream) = nullptr;
  ncclResult (*Recv)(void*, size_t, ncclDataType, int, ncclComm, cudaStream) = nullptr;
  ncclResult (*GroupStart)() = nullptr;
  ncclResult (*GroupEnd)() = nullptr;
  ncclResult (*RedOpCreatePreMulSum)(ncclRedOp*, void*, ncclDataType, int, ncclComm) = nullptr;
  ncclResult (*RedOpDestroy)(ncclRedOp, ncclComm) = nullptr;
  const char* (*GetNcclErrorString)(ncclResult) = nullptr;

  std::string cudart_path, nccl_path;  // what was opened
  int nccl_version = 0;                // e.g. 22703 for 2.27.3
  int device_count = 0;

  // Opens the libraries once per process: the first of each list that opens wins (a library this
  // process already mapped, such as torch's, is preferred to any path). Returns "" or why the
  // NCCL data plane cannot run here, naming the missing piece and the fix. Later calls return the
  // first call's answer whatever their lists.
  static std::string load(const std::vector<std::string>& cudart_candidates,
                          const std::vector<std::string>& nccl_candidates);
  // The loaded library; throws std::runtime_error with load()'s reason when it did not load.
  static const GpuLibrary& get();
  // Whether load() has been called (and what it said).
  static bool attempted(std::string* error);
  // After load(), whatever it found, even when it failed (paths empty where nothing opened).
  static const GpuLibrary& found();

  // Message for a failed CUDA / NCCL call, naming the call.
  std::string cuda_error(const char* call, cudaError e) const;
  std::string nccl_error(const char* call, ncclResult e) const;
};

}  // namespace hs::gpu
