// Transport's set-up: the TCP links to every peer (greeted and proven with the job's token) and
// the shared-memory rings to the peers on this host.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transport/channels.h"
#include "transport/cpu_placement.h"
#include "transport/peer_admission.h"
#include "transport/peer_handshake.h"
#include "transport/single_copy.h"
#include "transport/socket_util.h"
#include "transport/tcp_link.h"
#include "transport/transport.h"

namespace hs {

void Transport::connect(const std::vector<PeerAddress>& peers, const TransportOptions& opt) {
  opt_ = opt;
  peers_ = peers;
  local_index_.assign(size_, -1);
  live_fd_.assign(size_, -1);
  gone_.assign(size_, 0);
  lost_errno_.assign(size_, 0);
  peer_failure_.assign(size_, std::string());
  data_.resize(size_);
  ctrl_.resize(size_);
  queues_.resize(size_);
  // Local ranks are those sharing my host_id, indexed in global-rank order.
  int idx = 0;
  for (int r = 0; r < size_; ++r)
    if (r == rank_ || (!opt.disable_shm && peers[r].host_id == peers[rank_].host_id)) local_index_[r] = idx++;
  local_size_ = idx;
  int same_host = 0;
  for (int r = 0; r < size_; ++r) same_host += peers[r].host_id == peers[rank_].host_id;
  // Without shared memory between them, the local ranks' masks stay unknown: go by this rank's.
  local_cpus_ = usable_cpus();
  oversubscribed_ = same_host > local_cpus_ || opt.yield_when_idle;
  if (size_ == 1) return;

  std::vector<int> data_fd(size_, -1), ctrl_fd(size_, -1);
  // Per peer and channel, the handshake's nonces (connector's, acceptor's) that its link's keys
  // derive from.
  std::vector<std::array<std::array<uint8_t, 2 * peer_wire::kNonce>, 3>> nonces(size_);
  auto channels_for = [&](int peer) { return is_local(peer) ? 1 : 3; };
  auto slot_of = [&](int peer, int channel) -> int& {
    return (channel == kLiveness ? live_fd_ : channel == kControl ? ctrl_fd : data_fd)[peer];
  };

  // Higher ranks connect to lower ones. Connects complete into the listen backlog, so every
  // greeting goes out before any answer is awaited; a lower rank answers once it has proven
  // itself to the ranks below it, which ends at rank 0, so the waits cannot form a cycle.
  std::vector<OutgoingPeer> outgoing;
  try {
    for (int peer = 0; peer < rank_; ++peer)
      for (int ch = 0; ch < channels_for(peer); ++ch)
        outgoing.push_back(greet_peer(peers[peer].host, peers[peer].port, rank_, peer, ch, opt.job_token,
                                      opt.data_plane_auth, opt.connect_timeout_ms, describe(peer)));
    for (auto& out : outgoing) {
      prove_to_peer(out, rank_, opt.job_token, opt.connect_timeout_ms, describe(out.peer));
      if (out.channel == kLiveness) watch_peer_liveness(out.fd);
      slot_of(out.peer, out.channel) = out.fd;
      std::memcpy(nonces[out.peer][out.channel].data(), out.nonce, peer_wire::kNonce);
      std::memcpy(nonces[out.peer][out.channel].data() + peer_wire::kNonce, out.acceptor_nonce, peer_wire::kNonce);
      out.fd = -1;
    }
  } catch (...) {
    for (auto& out : outgoing)
      if (out.fd >= 0) ::close(out.fd);
    throw;
  }
  int expected = 0;
  for (int peer = rank_ + 1; peer < size_; ++peer) expected += channels_for(peer);
  auto take = [&](const AdmittedPeer& a) {
    if (a.channel >= channels_for(a.peer) || slot_of(a.peer, a.channel) >= 0) return false;
    if (a.channel == kLiveness) watch_peer_liveness(a.fd);
    slot_of(a.peer, a.channel) = a.fd;
    std::memcpy(nonces[a.peer][a.channel].data(), a.connector_nonce, peer_wire::kNonce);
    std::memcpy(nonces[a.peer][a.channel].data() + peer_wire::kNonce, a.acceptor_nonce, peer_wire::kNonce);
    return true;
  };
  auto missing = [&]() {
    std::vector<int> ranks;
    for (int peer = rank_ + 1; peer < size_; ++peer)
      for (int ch = 0; ch < channels_for(peer); ++ch)
        if (slot_of(peer, ch) < 0) {
          ranks.push_back(peer);
          break;
        }
    return ranks;
  };
  accept_peers(listen_fd_, rank_, size_, kData + 1, opt.job_token, opt.data_plane_auth, expected,
               opt.connect_timeout_ms, take, missing, [&](int peer) { return describe(peer); });
  ::close(listen_fd_);
  listen_fd_ = -1;

  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || is_local(peer)) continue;
    ctrl_[peer].reset(new TcpLink(ctrl_fd[peer], peer, frame_keys(peer, kControl, nonces[peer][kControl].data())));
    data_[peer].reset(new TcpLink(data_fd[peer], peer, frame_keys(peer, kData, nonces[peer][kData].data())));
    remote_fds_.push_back(ctrl_fd[peer]);
    remote_fds_.push_back(data_fd[peer]);
  }
  if (local_size_ > 1) setup_shared_memory(peers, opt);
}

std::unique_ptr<FrameKeys> Transport::frame_keys(int peer, int channel, const uint8_t* nonces) const {
  if (!opt_.data_plane_auth) return nullptr;
  std::unique_ptr<FrameKeys> keys(new FrameKeys);
  const uint8_t* cn = nonces;
  const uint8_t* an = nonces + peer_wire::kNonce;
  Digest send = peer_wire::frame_key(opt_.job_token, cn, an, rank_, peer, channel);
  Digest recv = peer_wire::frame_key(opt_.job_token, cn, an, peer, rank_, channel);
  std::memcpy(keys->send, send.data(), sizeof keys->send);
  std::memcpy(keys->recv, recv.data(), sizeof keys->recv);
  keys->link = "from " + describe(peer) + " to " + describe(rank_) + " (" + (channel == kData ? "data" : "control") +
               " channel)";
  return keys;
}

void Transport::setup_shared_memory(const std::vector<PeerAddress>& peers, const TransportOptions& opt) {
  std::vector<int> locals;
  for (int r = 0; r < size_; ++r)
    if (is_local(r)) locals.push_back(r);
  int creator = locals.front();
  // Rings shrink as local ranks grow so the segment stays a few hundred MiB at most.
  size_t data_bytes = opt.shm_data_ring_bytes;
  while (data_bytes > (64 << 10) && data_bytes * local_size_ * (local_size_ - 1) > (size_t(512) << 20)) data_bytes /= 2;
  shm_data_ring_bytes_ = data_bytes;
  size_t ctrl_bytes = opt.shm_ctrl_ring_bytes;
  std::string name =
      "/hs-" + opt.job_token.substr(0, 16) + "-" + std::to_string(creator) + "-" + std::to_string(peers[creator].port);
  // Rounds over the liveness sockets, led by the creator: S (segment created) / A (attached, and
  // this rank's pid and probe word published), P (probe every peer) / Q (probed), D (every ring's
  // single-copy threshold is final).
  auto tell_locals = [&](char signal, const std::string& what) {
    for (int r : locals)
      if (r != rank_) send_all(live_fd_[r], &signal, 1, opt.connect_timeout_ms, what);
  };
  auto hear_from_locals = [&](const std::string& what) {
    for (int r : locals) {
      if (r == rank_) continue;
      char got = 0;
      recv_all(live_fd_[r], &got, 1, opt.connect_timeout_ms, "waiting for " + describe(r) + " to " + what);
    }
  };
  auto tell_creator = [&](char signal, const std::string& what) {
    send_all(live_fd_[creator], &signal, 1, opt.connect_timeout_ms, what);
  };
  auto hear_from_creator = [&](const std::string& what) {
    char got = 0;
    recv_all(live_fd_[creator], &got, 1, opt.connect_timeout_ms, "waiting for " + describe(creator) + " to " + what);
  };
  const int me = local_index_[rank_];
  auto publish = [&]() {
    my_bell_ = shm_->doorbell(me);
    probe_word_ = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(this);
    my_bell_->pid.store(static_cast<uint32_t>(getpid()));
    my_bell_->probe_addr.store(reinterpret_cast<uintptr_t>(&probe_word_));
    my_bell_->probe_value.store(probe_word_);
    const CpuMask mask = own_cpu_mask();
    for (int w = 0; w < CpuMask::kWords; ++w) my_bell_->cpus[w].store(mask.words[w]);
    my_bell_->cpus_known.store(mask.known ? 1 : 0);
  };
  if (rank_ == creator) {
    shm_ = ShmSegment::create(name, local_size_, data_bytes, ctrl_bytes);
    publish();
    tell_locals('S', "starting shared memory");
    hear_from_locals("attach shared memory");
    shm_->unlink();
    tell_locals('P', "starting the single-copy probe");
    probe_single_copy(locals);
    hear_from_locals("probe single-copy transfers");
    tell_locals('D', "finishing shared memory");
  } else {
    hear_from_creator("create the shared memory of this host's ranks");
    shm_ = ShmSegment::attach(name, local_size_, data_bytes, ctrl_bytes);
    publish();
    tell_creator('A', "acknowledging shared memory");
    hear_from_creator("start the single-copy probe");
    probe_single_copy(locals);
    tell_creator('Q', "acknowledging the single-copy probe");
    hear_from_creator("finish setting up shared memory");
  }
  decide_cpu_sharing(locals);
  for (int r : locals) {
    if (r == rank_) continue;
    auto* data = new ShmLink(shm_.get(), false, me, local_index_[r]);
    data_[r].reset(data);
    ctrl_[r].reset(new ShmLink(shm_.get(), true, me, local_index_[r]));
    if (data->send_single_copy_from() > 0)
      single_copy_send_from_ = std::min(single_copy_send_from_, data->send_single_copy_from());
  }
}

void Transport::decide_cpu_sharing(const std::vector<int>& locals) {
  // Every local rank published its mask before the creator's 'P'.
  std::vector<CpuMask> masks;
  for (int r : locals) {
    const Doorbell* bell = shm_->doorbell(local_index_[r]);
    CpuMask m;
    for (int w = 0; w < CpuMask::kWords; ++w) m.words[w] = bell->cpus[w].load();
    m.known = bell->cpus_known.load() != 0;
    masks.push_back(m);
  }
  local_cpus_ = std::max(1, cpus_in_union(masks));
  oversubscribed_ = !each_has_own_cpu(masks) || opt_.yield_when_idle;
}

void Transport::probe_single_copy(const std::vector<int>& locals) {
  const int me = local_index_[rank_];
  for (int r : locals) {
    if (r == rank_) continue;
    Doorbell* bell = shm_->doorbell(local_index_[r]);
    bool ok = opt_.shm_single_copy_bytes > 0 && can_read_peer_memory(static_cast<pid_t>(bell->pid.load()),
                                                                     bell->probe_addr.load(), bell->probe_value.load());
    shm_->ring(false, local_index_[r], me)->single_copy_from.store(ok ? opt_.shm_single_copy_bytes : 0);
  }
}

}  // namespace hs
