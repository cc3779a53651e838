#include "transport/mpi_group.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/errors.h"
#include "common/reduce.h"
#include "transport/mpi_library.h"

namespace hs {

namespace {
constexpr size_t kMaxMessage = size_t(1) << 30;  // MPI counts are int: larger transfers are split
constexpr int kTag = 0x4853;
}  // namespace

MpiGroup::MpiGroup(uintptr_t comm, std::vector<int> ranks, Transport* t, int data_timeout_ms)
    : comm_(reinterpret_cast<void*>(comm)), ranks_(std::move(ranks)), t_(t), data_timeout_ms_(data_timeout_ms) {
  const MpiLibrary& mpi = MpiLibrary::get();
  int me = -1;
  mpi.Comm_rank(comm_, &me);
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i] == me) my_index_ = static_cast<int>(i);
}

void MpiGroup::exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) {
  const MpiLibrary& mpi = MpiLibrary::get();
  std::vector<void*> reqs;
  // Reductions receive into staging first and fold in once the data is complete.
  size_t staging_bytes = 0;
  for (const auto& r : recvs)
    if (r.mode == RecvMode::kReduce) staging_bytes += r.bytes;
  if (staging_.size() < staging_bytes) staging_.resize(staging_bytes);
  std::vector<uint8_t*> landing(recvs.size());
  size_t off = 0;
  for (size_t i = 0; i < recvs.size(); ++i) {
    const RecvSpec& r = recvs[i];
    landing[i] = r.mode == RecvMode::kReduce ? staging_.data() + off : static_cast<uint8_t*>(r.dest);
    if (r.mode == RecvMode::kReduce) off += r.bytes;
    for (size_t done = 0; done < r.bytes; done += kMaxMessage) {
      void* req = nullptr;
      int n = static_cast<int>(std::min(kMaxMessage, r.bytes - done));
      if (mpi.Irecv(landing[i] + done, n, mpi.byte_type, ranks_.at(r.peer), kTag, comm_, &req) != 0)
        throw TransportError("MPI_Irecv failed");
      reqs.push_back(req);
    }
  }
  for (const auto& s : sends) {
    for (size_t done = 0; done < s.bytes; done += kMaxMessage) {
      void* req = nullptr;
      int n = static_cast<int>(std::min(kMaxMessage, s.bytes - done));
      if (mpi.Isend(static_cast<const uint8_t*>(s.data) + done, n, mpi.byte_type, ranks_.at(s.peer), kTag, comm_,
                    &req) != 0)
        throw TransportError("MPI_Isend failed");
      reqs.push_back(req);
    }
  }
  auto start = std::chrono::steady_clock::now();
  auto last_check = start;
  int spins = 0;
  while (!reqs.empty()) {
    int flag = 0;
    if (mpi.Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, nullptr) != 0)
      throw TransportError("MPI_Testall failed");
    if (flag) break;
    if (++spins < 1000) continue;
    sched_yield();
    auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(50)) {
      last_check = now;
      std::vector<int> gone;
      std::vector<int> dead = t_->check_peers(&gone);
      for (int p : dead) {
        for (int r : ranks_)
          if (r == p) throw TransportError(t_->describe(p) + " exited unexpectedly during an MPI transfer");
      }
      if (now - start > std::chrono::milliseconds(data_timeout_ms_))
        throw TransportError("MPI transfer made no progress for " + std::to_string(data_timeout_ms_ / 1000) +
                             " s (HOROVOD_DATA_TIMEOUT_SECONDS raises the limit)");
    }
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    const RecvSpec& r = recvs[i];
    if (r.mode != RecvMode::kReduce || r.bytes == 0) continue;
    const void* local = r.local ? r.local : r.dest;
    const size_t count = r.bytes / dtype_size(r.dtype);
    if (r.incoming_first) reduce_buffers(r.dest, landing[i], local, count, r.dtype, r.op);
    else reduce_buffers(r.dest, local, landing[i], count, r.dtype, r.op);
    scale_buffer(r.dest, count, r.dtype, r.postscale);
  }
}

}  // namespace hs
