#include "gpu/gpu_library.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace hs::gpu {

namespace {
std::mutex g_mu;
bool g_attempted = false;
std::string g_error;
GpuLibrary g_lib;

const char* const kStagingFix =
    "\nCollectives on CUDA tensors still work without it: they are staged through host memory "
    "(HOROVOD_GPU_OPERATIONS=HOST chooses that explicitly).";

// The first candidate this process has mapped already, else the first that opens. *tried lists
// each candidate's dlerror for the message when none opens.
void* open_first(const std::vector<std::string>& candidates, std::string* path, std::string* tried) {
  for (const auto& c : candidates)
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) {
      *path = c;
      return h;
    }
  for (const auto& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      *path = c;
      return h;
    }
    const char* why = dlerror();
    *tried += "\n  " + c + ": " + (why ? why : "cannot be opened");
  }
  return nullptr;
}

template <typename F>
void resolve(void* lib, const char* name, const std::string& path, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out)
    throw std::runtime_error(path + " lacks " + name +
                             ": it is too old or not the library its name says (NCCL 2.12 or later and the CUDA 12 "
                             "runtime are needed).");
}

void load_cudart(void* h, const std::string& p, GpuLibrary& lib) {
  resolve(h, "cudaGetDeviceCount", p, &lib.GetDeviceCount);
  resolve(h, "cudaGetDevice", p, &lib.GetDevice);
  resolve(h, "cudaSetDevice", p, &lib.SetDevice);
  resolve(h, "cudaStreamCreateWithFlags", p, &lib.StreamCreateWithFlags);
  resolve(h, "cudaStreamDestroy", p, &lib.StreamDestroy);
  resolve(h, "cudaEventCreateWithFlags", p, &lib.EventCreateWithFlags);
  resolve(h, "cudaEventDestroy", p, &lib.EventDestroy);
  resolve(h, "cudaEventRecord", p, &lib.EventRecord);
  resolve(h, "cudaEventQuery", p, &lib.EventQuery);
  resolve(h, "cudaStreamWaitEvent", p, &lib.StreamWaitEvent);
  resolve(h, "cudaDeviceGetPCIBusId", p, &lib.DeviceGetPCIBusId);
  resolve(h, "cudaGetErrorString", p, &lib.GetErrorString);
}

void load_nccl(void* h, const std::string& p, GpuLibrary& lib) {
  resolve(h, "ncclGetVersion", p, &lib.GetVersion);
  resolve(h, "ncclGetUniqueId", p, &lib.GetUniqueId);
  resolve(h, "ncclCommInitRank", p, &lib.CommInitRank);
  resolve(h, "ncclCommDestroy", p, &lib.CommDestroy);
  resolve(h, "ncclCommAbort", p, &lib.CommAbort);
  resolve(h, "ncclCommGetAsyncError", p, &lib.CommGetAsyncError);
  resolve(h, "ncclAllReduce", p, &lib.AllReduce);
  resolve(h, "ncclBroadcast", p, &lib.Broadcast);
  resolve(h, "ncclReduce", p, &lib.Reduce);
  resolve(h, "ncclAllGather", p, &lib.AllGather);
  resolve(h, "ncclReduceScatter", p, &lib.ReduceScatter);
  resolve(h, "ncclSend", p, &lib.Send);
  resolve(h, "ncclRecv", p, &lib.Recv);
  resolve(h, "ncclGroupStart", p, &lib.GroupStart);
  resolve(h, "ncclGroupEnd", p, &lib.GroupEnd);
  resolve(h, "ncclRedOpCreatePreMulSum", p, &lib.RedOpCreatePreMulSum);
  resolve(h, "ncclRedOpDestroy", p, &lib.RedOpDestroy);
  resolve(h, "ncclGetErrorString", p, &lib.GetNcclErrorString);
}

// Every problem found, one per paragraph: a machine may lack the library and the GPU both.
std::string try_load(const std::vector<std::string>& cudart, const std::vector<std::string>& nccl, GpuLibrary& lib) {
  std::string problems, tried;
  void* h = open_first(cudart, &lib.cudart_path, &tried);
  if (h) {
    load_cudart(h, lib.cudart_path, lib);
    int count = 0;
    cudaError e = lib.GetDeviceCount(&count);
    if (e != kCudaSuccess || count == 0)
      problems += "\nNo CUDA device is visible to this process (" +
                  (e != kCudaSuccess ? lib.cuda_error("cudaGetDeviceCount", e) : std::string("cudaGetDeviceCount: 0")) +
                  "): check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES and the GPUs Spark gave the task.";
    lib.device_count = count;
  } else {
    problems +=
        "\nThe CUDA runtime library (libcudart) could not be loaded; tried:" + tried +
        "\nInstall CUDA 12's runtime (pip install nvidia-cuda-runtime-cu12; a CUDA build of torch brings it) or "
        "put its directory on LD_LIBRARY_PATH.";
  }
  tried.clear();
  h = open_first(nccl, &lib.nccl_path, &tried);
  if (h) {
    load_nccl(h, lib.nccl_path, lib);
    lib.GetVersion(&lib.nccl_version);
  } else {
    problems += "\nNVIDIA's NCCL library (libnccl.so.2) could not be loaded; tried:" + tried +
                "\nInstall it with pip install nvidia-nccl-cu12 (a CUDA build of torch brings it), or set "
                "HOROVOD_SPARK_NCCL_LIBRARY to the path of libnccl.so.2.";
  }
  return problems.empty() ? problems : problems + kStagingFix;
}
}  // namespace

std::string GpuLibrary::load(const std::vector<std::string>& cudart_candidates,
                             const std::vector<std::string>& nccl_candidates) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_attempted) return g_error;
  g_attempted = true;
  try {
    g_error = try_load(cudart_candidates, nccl_candidates, g_lib);
  } catch (const std::exception& e) {
    g_error = e.what();
  }
  if (!g_error.empty()) g_error = "NCCL data plane unavailable:" + g_error;
  return g_error;
}

const GpuLibrary& GpuLibrary::get() {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_attempted) throw std::runtime_error("NCCL data plane unavailable: its libraries were never loaded");
  if (!g_error.empty()) throw std::runtime_error(g_error);
  return g_lib;
}

const GpuLibrary& GpuLibrary::found() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_lib;
}

bool GpuLibrary::attempted(std::string* error) {
  std::lock_guard<std::mutex> l(g_mu);
  if (error) *error = g_error;
  return g_attempted;
}

std::string GpuLibrary::cuda_error(const char* call, cudaError e) const {
  const char* text = GetErrorString ? GetErrorString(e) : nullptr;
  return std::string(call) + " failed: " + (text ? text : "CUDA error") + " (" + std::to_string(e) + ")";
}

std::string GpuLibrary::nccl_error(const char* call, ncclResult e) const {
  const char* text = GetNcclErrorString ? GetNcclErrorString(e) : nullptr;
  return std::string(call) + " failed: " + (text ? text : "NCCL error") + " (" + std::to_string(e) + ")";
}

}  // namespace hs::gpu
