// The mesh of links between this rank and every other: shared memory for peers on this host, TCP
// for the rest, plus one TCP "liveness" socket per peer whose EOF (without a goodbye byte) is how a
// crashed peer is noticed. Collectives reach it through exchange(); the engine through the control
// channel (framed messages, never blocking the caller).
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/group.h"
#include "transport/peer_link.h"
#include "transport/shm_segment.h"
#include "transport/single_copy.h"

namespace hs {

struct PeerAddress {
  std::string host;     // address other ranks connect to
  int port = 0;
  std::string host_id;  // equal host_id => same machine => shared memory
};

struct TransportOptions {
  std::string job_token;          // secret-derived key of the peer handshake (peer_handshake.h)
  int connect_timeout_ms = 120000;
  int data_timeout_ms = 600000;   // an exchange that makes no progress this long fails
  size_t shm_data_ring_bytes = 4 << 20;
  size_t shm_ctrl_ring_bytes = 1 << 20;
  // Messages between ranks on this host of at least this many bytes are read straight out of the
  // sender's memory (single_copy.h) where the host allows it; 0: always through the ring.
  // 512 KiB: where single-copy starts to win. Intel Xeon, 2 cores, 2 ranks, medians: a 1 MiB
  // allreduce (two 512 KiB messages per rank) 137-155 us through the ring, 104-111 us single-copy;
  // a 768 KiB one (384 KiB messages) 97-103 us through the ring, 121-125 us single-copy; 512 KiB
  // allgather, broadcast and 1 MiB reducescatter, alltoall also 25-65% faster single-copy.
  size_t shm_single_copy_bytes = 512 << 10;
  bool disable_shm = false;       // HOROVOD_SHM_DISABLE=1: force TCP between local ranks
  // HOROVOD_SPARK_DATA_PLANE_AUTH: every TCP control and data link carries authenticated frames
  // (tcp_link.h); both ends must agree, which the handshake checks (peer_handshake.h).
  bool data_plane_auth = false;
  // HOROVOD_YIELD_WHEN_IDLE=1: wait as if this host's CPUs were shared, for ranks whose CPUs are
  // shared with ranks this one cannot see (other hosts that are containers or namespaces on one machine).
  bool yield_when_idle = false;
};

struct FrameKeys;

class Transport {
 public:
  // Listens for peers on bind_host ("" or "0.0.0.0": every interface).
  Transport(int rank, int size, const std::string& bind_host = "");
  ~Transport();
  int listen_port() const { return listen_port_; }
  // Connects to every peer (blocking, bounded by connect_timeout_ms).
  void connect(const std::vector<PeerAddress>& peers, const TransportOptions& opt);
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_local(int peer) const { return local_index_[peer] >= 0; }
  const std::string& host_id(int peer) const { return peers_[peer].host_id; }
  int local_rank() const { return local_index_[rank_]; }
  int local_size() const { return local_size_; }
  // More ranks on this host than CPUs this process may run on: waiting then yields the CPU at
  // once instead of spinning, since the rank being waited for may need this very core.
  // Whether this host's ranks share CPUs (so waits yield rather than spin), and how many CPUs they
  // may use between them: from every local rank's affinity mask (see cpu_placement.h).
  bool oversubscribed() const { return oversubscribed_; }
  int local_cpus() const { return local_cpus_; }
  // True when every peer is reached through shared memory whose data rings hold at least
  // `bytes` with room to spare: a send of that size then completes without the peer reading.
  bool can_send_unread(size_t bytes) const {
    return local_size_ == size_ && size_ > 1 && bytes * 4 <= shm_data_ring_bytes_ && bytes < single_copy_send_from_;
  }

  // Point-to-point transfers between global ranks (see Group::exchange).
  void exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs);
  // Bytes this rank has received single-copy (single_copy.h), read straight out of peers' memory.
  int64_t single_copy_bytes() const { return single_copy_bytes_.load(std::memory_order_relaxed); }
  // Bytes this rank has written into peers' single-copy receives, sharing their copy (single_copy.h).
  int64_t shared_copy_bytes() const { return shared_copy_bytes_.load(std::memory_order_relaxed); }
  // See Group::scatter_through (the calling thread's exchanges only run one at a time anyway).
  void scatter_through(const ScatteredBuffer* b) { scattered_ = b; }

  // Between these, wake-ups owed to peers for data written are collected and rung once per peer
  // at the end (or before this rank waits for anything): a message sent in several parts (a note
  // and its data) then costs a peer one wake-up, not one per part. Use NotifyBatch.
  void hold_notifies();
  void release_notifies();

  // Control messages: queued and flushed by progress_control(); never block.
  void post_control(int peer, std::string msg);
  bool pop_control(int peer, std::string* msg);
  // The first byte (the kind) of the message pop_control would return next; false when none.
  bool peek_control(int peer, uint8_t* kind) const {
    const auto& ready = queues_[static_cast<size_t>(peer)].ready;
    if (ready.empty() || ready.front().empty()) return false;
    *kind = static_cast<uint8_t>(ready.front()[0]);
    return true;
  }
  bool progress_control();
  // Control messages posted but not yet all written to their links (a full ring).
  bool has_unsent_control() const;

  // Sleep until a peer or a local thread signals activity, or timeout. Read the token first,
  // then look for work, then wait with it (on the same thread): a signal or a message in between
  // is never lost. Reading the token also notes every link's news_mark for this thread.
  uint32_t activity_token() const;
  void wait_for_activity(uint32_t token, int timeout_us);
  void notify_self();

  // Reads goodbye bytes and EOFs from the liveness sockets. Returns ranks newly found dead
  // (closed without goodbye) and adds ranks that said goodbye to *gone.
  std::vector<int> check_peers(std::vector<int>* gone);
  bool peer_gone(int peer) const { return gone_[peer] != 0; }
  std::string describe(int peer) const;
  // What happened to a peer check_peers found dead: it exited, failed (with its error), or its
  // host stopped answering.
  std::string fate(int peer) const;
  // Leaving after this fatal error: close() tells the peers so they can name the root cause.
  void set_failure(const std::string& error) { failure_ = error; }
  // `error`, plus the error of a peer that failed before us, if one said so (an error that only
  // says a peer closed its connection then also says why it did).
  std::string explain(const std::string& error);

  // Sends goodbye to every peer and closes everything.
  void close();

 private:
  struct ControlQueue {
    std::deque<std::string> out;
    size_t out_off = 0;
    std::string in;
    std::deque<std::string> ready;
  };
  // The keys of the authenticated TCP link to `peer` on `channel` (null when the setting is off).
  std::unique_ptr<FrameKeys> frame_keys(int peer, int channel, const uint8_t* nonces) const;
  void setup_shared_memory(const std::vector<PeerAddress>& peers, const TransportOptions& opt);
  // Per local peer: may this rank read its memory? Writes the answer into the ring it reads.
  void probe_single_copy(const std::vector<int>& locals);
  void decide_cpu_sharing(const std::vector<int>& locals);
  void notify_written(int peer, PeerLink* link);  // notify_peer now, or owed while holding
  bool has_news() const;  // a link's news_mark moved since this thread's activity_token()
  static bool has_news_thunk(void* self) { return static_cast<Transport*>(self)->has_news(); }
  // One receive's progress in exchange(), through the ring (off counts stream bytes, padding
  // included) or single-copy; true when something moved.
  bool receive_through_ring(PeerLink* link, const RecvSpec& spec, size_t esize, size_t total, size_t& off);
  // (transport_single_copy.cc; may_claim: see advance_shared_copy)
  bool receive_single_copy(PeerLink* link, ShmLink* shm, const RecvSpec& spec, size_t esize, SingleCopyProgress& at,
                           bool may_claim);
  // A shared copy (single_copy.h), receiving: claims and reads one chunk (unless !may_claim), or
  // completes the message once every chunk is claimed and the sender's have landed; false when
  // neither could be done yet.
  bool advance_shared_copy(ShmLink* shm, const RecvSpec& spec, SingleCopyProgress& at, bool may_claim);
  // Sending: claims one chunk of the receiver's offer for the message ending at `message_end`
  // (`bytes` bytes at `source` here) and writes it into the receiver; false when none is left.
  bool push_shared_copy(ShmLink* shm, int peer, uint64_t message_end, const uint8_t* source, size_t bytes);
  // Where a receive's bytes [off, off + k) land (*dst) and what a kReduce folds them with (*local:
  // the spec's local input, else the destination itself); a scattered buffer cuts k at the end of
  // its piece.
  void locate_received(const RecvSpec& spec, size_t off, size_t& k, uint8_t** dst, const uint8_t** local) const;
  // A kReduce receive's arithmetic on `count` elements that arrived: dst = local (op) incoming,
  // in the spec's operand order, then its postscale.
  static void fold_received(const RecvSpec& spec, uint8_t* dst, const uint8_t* local, const uint8_t* incoming,
                            size_t count);
  void wait_in_exchange(uint32_t token, const std::vector<int>& peers, int64_t& idle_since_us, int& spins);

  int rank_, size_;
  int listen_fd_ = -1, listen_port_ = 0;
  std::vector<PeerAddress> peers_;
  std::vector<int> local_index_;
  int local_size_ = 1;
  std::vector<int> live_fd_;    // liveness socket per peer
  std::vector<char> gone_;      // 1 = said goodbye, 2 = died
  std::vector<int> lost_errno_;  // for gone_ == 2: the liveness socket's error (0: closed)
  std::vector<std::string> peer_failure_;  // for gone_ == 2: the error a failed peer sent
  std::string failure_;                    // ours, sent instead of goodbye
  std::vector<std::unique_ptr<PeerLink>> data_, ctrl_;
  std::vector<ControlQueue> queues_;
  std::unique_ptr<ShmSegment> shm_;
  Doorbell private_bell_{};
  Doorbell* my_bell_ = &private_bell_;
  std::vector<int> remote_fds_;
  TransportOptions opt_;
  bool closed_ = false;
  bool oversubscribed_ = false;
  int local_cpus_ = 1;
  size_t shm_data_ring_bytes_ = 0;
  bool holding_notifies_ = false;
  const ScatteredBuffer* scattered_ = nullptr;
  std::vector<PeerLink*> owed_notifies_;  // by peer, while holding
  uint64_t probe_word_ = 0;  // what local peers read to learn that they can read this rank's memory
  size_t single_copy_send_from_ = SIZE_MAX;  // the least send_single_copy_from() of the local peers
  std::atomic<int64_t> single_copy_bytes_{0};
  std::atomic<int64_t> shared_copy_bytes_{0};
};

// Holds a transport's wake-ups for the lifetime of this object (see hold_notifies).
class NotifyBatch {
 public:
  explicit NotifyBatch(Transport& t) : t_(t) { t_.hold_notifies(); }
  ~NotifyBatch() { t_.release_notifies(); }
  NotifyBatch(const NotifyBatch&) = delete;
  NotifyBatch& operator=(const NotifyBatch&) = delete;

 private:
  Transport& t_;
};

// A Group over a subset of the transport's ranks (the global set or a process set).
class PeerGroup : public Group {
 public:
  PeerGroup(Transport* t, std::vector<int> ranks);
  int rank() const override { return my_index_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int global_rank(int index) const override { return ranks_[index]; }
  void exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) override;
  // Declines (the engine then stages through its fusion buffer) when a TCP peer would receive
  // small pieces: every piece is a syscall each way, so 256 tensors of 16 KiB took 2.5x as long
  // as one copy into a contiguous buffer and one stream. Shared memory takes any piece size.
  bool scatter_through(const ScatteredBuffer* b) override;

 private:
  Transport* t_;
  std::vector<int> ranks_;
  int my_index_ = -1;
  bool identity_ = false;  // ranks_[i] == i for every rank of the transport
};

}  // namespace hs
