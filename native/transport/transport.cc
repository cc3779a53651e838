#include "transport/transport.h"

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>

#include "common/errors.h"
#include "common/reduce.h"
#include "transport/channels.h"
#include "transport/single_copy.h"
#include "transport/socket_util.h"
#include "transport/tcp_link.h"

namespace hs {

namespace {
constexpr char kGoodbye = 'B';
// Instead of goodbye, a rank that leaves after a fatal error sends kFailed and the error's text
// (at most kMaxFailureText bytes): its peers then name the root cause, not just its departure.
constexpr char kFailed = 'F';
constexpr size_t kMaxFailureText = 1024;
constexpr size_t kMaxChunk = 256 << 10;  // bounded pieces let the receiver start reducing early
// Idle time inside an exchange before pause-spinning gives way to sched_yield, and before
// yielding gives way to sleeping on the doorbell.
constexpr int64_t kSpinUs = 50;
constexpr int64_t kYieldUs = 500;
// How long a wait that watches sockets sleeps on them before it looks at the shared-memory
// doorbell again.
constexpr int64_t kSocketSliceUs = 50;

// try_send; on a full ring, tell the reader we wait for space and try once more, so that room
// freed in between is never missed (see PeerLink::wait_for_space).
size_t send_or_wait_for_space(PeerLink* link, const uint8_t* p, size_t n) {
  size_t sent = link->try_send(p, n);
  if (sent == 0) {
    link->wait_for_space(true);
    sent = link->try_send(p, n);
  }
  return sent;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Transport::Transport(int rank, int size, const std::string& bind_host) : rank_(rank), size_(size) {
  if (size > 1) listen_fd_ = tcp_listen(bind_host, &listen_port_);
}

Transport::~Transport() { close(); }

std::string Transport::describe(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return "rank " + std::to_string(peer);
  const PeerAddress& a = peers_[peer];
  if (a.host_id.empty() || a.host_id == a.host) return "rank " + std::to_string(peer) + " (" + a.host + ")";
  return "rank " + std::to_string(peer) + " (host " + a.host_id + ", " + a.host + ")";
}

std::string Transport::fate(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(lost_errno_.size())) return "exited unexpectedly";
  if (!peer_failure_[peer].empty()) return "failed: " + peer_failure_[peer];
  int e = lost_errno_[peer];
  if (e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH)
    return "stopped answering (its host gave no sign of life for " + std::to_string(kPeerSilenceLimitMs / 1000) +
           " s: a network link or the host is down)";
  return "exited unexpectedly";
}

namespace {
// The news marks seen by this thread's last activity_token(), link by link. Unread bytes that
// were already there then are no news: the thread looked and had no use for them yet (a peer's
// early-sent input, say), and counting them would keep it from ever sleeping.
thread_local std::vector<uint64_t> tl_news_marks;
}  // namespace

uint32_t Transport::activity_token() const {
  uint32_t token = my_bell_->seq.load(std::memory_order_seq_cst);
  if (shm_) {
    tl_news_marks.resize(2 * static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      tl_news_marks[2 * p] = data_[p] ? data_[p]->news_mark() : 0;
      tl_news_marks[2 * p + 1] = ctrl_[p] ? ctrl_[p]->news_mark() : 0;
    }
  }
  return token;
}

void Transport::notify_self() { doorbell_ring(my_bell_); }

void Transport::hold_notifies() {
  holding_notifies_ = true;
  owed_notifies_.assign(size_, nullptr);
}

void Transport::release_notifies() {
  holding_notifies_ = false;
  for (PeerLink*& link : owed_notifies_)
    if (link) {
      link->notify_peer();
      link = nullptr;
    }
}

void Transport::notify_written(int peer, PeerLink* link) {
  if (holding_notifies_) owed_notifies_[peer] = link;  // a peer's links share one doorbell
  else link->notify_peer();
}

bool Transport::has_news() const {
  if (!shm_ || tl_news_marks.size() != 2 * static_cast<size_t>(size_)) return false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if ((data_[p] && data_[p]->news_mark() != tl_news_marks[2 * p]) ||
        (ctrl_[p] && ctrl_[p]->news_mark() != tl_news_marks[2 * p + 1]))
      return true;
  }
  return false;
}

void Transport::wait_for_activity(uint32_t token, int timeout_us) {
  if (remote_fds_.empty()) {
    doorbell_wait(my_bell_, token, timeout_us, &Transport::has_news_thunk, this);
    return;
  }
  // Sockets and the futex cannot be waited on together. Sleep in the kernel on the sockets, in
  // slices short enough that the doorbell is looked at often: a futex sleep here would leave a
  // message from another host unread until it timed out (the slices of ppoll are microseconds;
  // poll's milliseconds would be far too coarse).
  static thread_local std::vector<pollfd> fds;
  fds.clear();
  for (int fd : remote_fds_) fds.push_back({fd, POLLIN, 0});
  int64_t end = now_us() + timeout_us;
  while (my_bell_->seq.load() == token && !has_news()) {
    int64_t slice = std::min<int64_t>(end - now_us(), kSocketSliceUs);
    if (slice <= 0) return;
    timespec ts{0, static_cast<long>(slice * 1000)};
    if (ppoll(fds.data(), fds.size(), &ts, nullptr) > 0) return;
  }
}

std::vector<int> Transport::check_peers(std::vector<int>* gone) {
  std::vector<int> dead;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || gone_[p] || live_fd_[p] < 0) continue;
    char buf[kMaxFailureText + 1];
    ssize_t k = recv(live_fd_[p], buf, sizeof(buf), MSG_DONTWAIT);
    if (k > 0 && buf[0] == kFailed) {
      gone_[p] = 2;
      peer_failure_[p].assign(buf + 1, static_cast<size_t>(k) - 1);
      dead.push_back(p);
    } else if (k > 0) {
      if (std::memchr(buf, kGoodbye, static_cast<size_t>(k))) {
        gone_[p] = 1;
        if (gone) gone->push_back(p);
      }
    } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      gone_[p] = 2;
      lost_errno_[p] = k == 0 ? 0 : errno;
      dead.push_back(p);
    }
  }
  return dead;
}

void Transport::wait_in_exchange(uint32_t token, const std::vector<int>& peers, int64_t& idle_since_us, int& spins) {
  // Peers usually answer within microseconds, and a futex sleep costs tens of them on a VM:
  // spin first (only when every rank has a CPU of its own), then yield, then sleep.
  if (holding_notifies_) release_notifies();  // a peer we wait for may be waiting for these
  // While spinning, read the clock every 16th round only: a read costs as much as the poll of
  // every link. kPastSpinning marks a wait that has moved on to yielding or sleeping.
  constexpr int kPastSpinning = 1 << 30;
  if (!oversubscribed_ && spins < kPastSpinning && (spins++ & 15) != 0) {
    _mm_pause();
    return;
  }
  int64_t now = now_us();
  if (idle_since_us == 0) idle_since_us = now;
  int64_t idle_us = now - idle_since_us;
  if (!oversubscribed_ && idle_us < kSpinUs) {
    _mm_pause();
    return;
  }
  spins = kPastSpinning;
  if (idle_us < kYieldUs) {
    sched_yield();
    return;
  }
  std::vector<int> gone_now;
  std::vector<int> dead = check_peers(&gone_now);
  for (int p : peers) {
    // A peer that left has flushed everything it sent; a short grace lets in-flight bytes land.
    if (gone_[p] && now - idle_since_us > 500000)
      throw TransportError(describe(p) + " " + (gone_[p] == 2 ? fate(p) : "has shut down") + " during a collective");
  }
  // A peer outside this exchange that died dooms the job as well (the engine fails on it next):
  // fail now, naming it, rather than wait for peers that may be waiting on it.
  if (!dead.empty()) throw TransportError(describe(dead[0]) + " " + fate(dead[0]) + " during a collective");
  if (now - idle_since_us > static_cast<int64_t>(opt_.data_timeout_ms) * 1000) {
    std::string who;
    for (int p : peers) who += (who.empty() ? "" : ", ") + describe(p);
    throw TransportError("no progress for " + std::to_string(opt_.data_timeout_ms / 1000) + " s exchanging data with " +
                         who + " (HOROVOD_DATA_TIMEOUT_SECONDS raises the limit)");
  }
  wait_for_activity(token, 1000);
}

void Transport::exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) {
  struct SendState {
    PeerLink* link;
    const uint8_t* p;  // what goes into the stream: the data, or a single-copy message's spans
    size_t bytes, total, off;
    int peer;
    ShmLink* single_copy;     // set: complete once the peer has copied up to await_copied
    uint64_t await_copied;
    bool done;
    // Set for a single-copy message in one range that this rank may write into the peer: it
    // helps with the peer's copy (a shared copy, single_copy.h) while it waits.
    const uint8_t* shared_source = nullptr;
    size_t message_bytes = 0;
  };
  struct RecvState {
    PeerLink* link;
    const RecvSpec* spec;
    size_t total, off, esize;  // (a single-copy receive keeps its progress in `at` instead)
    ShmLink* single_copy;      // set: the stream carries the sender's spans
    SingleCopyProgress at;
    bool done;
  };
  // Reused across calls (exchanges never nest): a small collective is a few exchanges, and
  // three allocations each would cost more than the copy of its data.
  static thread_local std::vector<SendState> ss;
  static thread_local std::vector<RecvState> rs;
  static thread_local std::vector<int> peers;
  static thread_local std::vector<std::vector<RemoteSpan>> spans;  // per single-copy send
  ss.clear();
  rs.clear();
  peers.clear();
  auto link_for = [&](int peer) -> PeerLink* {
    if (peer < 0 || peer >= size_ || peer == rank_ || !data_[peer])
      throw CollectiveError("internal: exchange with invalid peer " + std::to_string(peer));
    return data_[peer].get();
  };
  auto padded = [](size_t n, size_t a) { return (n + a - 1) / a * a; };
  auto takes_single_copy = [](ShmLink* shm, size_t threshold, size_t bytes) {
    return shm != nullptr && threshold > 0 && bytes >= threshold;
  };
  size_t single_copy_sends = 0;
  for (const auto& s : sends) {
    PeerLink* l = link_for(s.peer);
    if (s.bytes == 0) continue;
    SendState st{
        l, static_cast<const uint8_t*>(s.data), s.bytes, padded(s.bytes, l->alignment()), 0, s.peer, nullptr, 0, false};
    ShmLink* shm = l->shm();
    if (takes_single_copy(shm, shm ? shm->send_single_copy_from() : 0, s.bytes)) {
      if (spans.size() <= single_copy_sends) spans.resize(single_copy_sends + 1);
      std::vector<RemoteSpan>& mine = spans[single_copy_sends++];
      describe_spans(st.p, s.bytes, scattered_, &mine);
      st.p = reinterpret_cast<const uint8_t*>(mine.data());
      st.bytes = mine.size() * sizeof(RemoteSpan);
      st.total = padded(st.bytes, l->alignment());
      st.single_copy = shm;
      st.await_copied = shm->note_single_copy_send(s.bytes);
      st.message_bytes = s.bytes;
      if (mine.size() == 1 && shm->may_write_peer()) st.shared_source = reinterpret_cast<const uint8_t*>(mine[0].addr);
    }
    ss.push_back(st);
    peers.push_back(s.peer);
  }
  for (const auto& r : recvs) {
    PeerLink* l = link_for(r.peer);
    if (r.bytes == 0) continue;
    size_t es = r.mode == RecvMode::kReduce ? dtype_size(r.dtype) : 1;
    ShmLink* shm = l->shm();
    ShmLink* single_copy = takes_single_copy(shm, shm ? shm->recv_single_copy_from() : 0, r.bytes) ? shm : nullptr;
    rs.push_back({l, &r, padded(r.bytes, l->alignment()), 0, es, single_copy, SingleCopyProgress(), false});
    peers.push_back(r.peer);
  }
  size_t pending = ss.size() + rs.size();
  int64_t idle_since = 0;
  int spins = 0;
  // A shared receive abandoned part way (an exception below) withdraws its offer, so that the
  // sender claims no more of a buffer whose owner may reuse it (every completed one is no longer
  // shared).
  struct WithdrawOffers {
    std::vector<RecvState>& rs;
    ~WithdrawOffers() {
      for (auto& r : rs)
        if (r.at.shared) r.single_copy->withdraw_copy_share();
    }
  } withdraw{rs};
  while (pending > 0) {
    uint32_t token = activity_token();
    bool progress = false;
    // A rank that wrote a chunk into a peer this pass leaves the chunks offered to it for the
    // next: when both ends of a pair send, each then writes its own message into the other's
    // buffer, and result buffers (the receiving side of an allgather or alltoall) sit on huge
    // pages (result_buffer.cc), so the writes pin far fewer pages than reads of the senders'
    // tensors would. What a peer leaves unclaimed is read once there is nothing left to write.
    bool pushed = false;
    for (auto& s : ss) {
      if (s.done) continue;
      bool moved = false;
      while (s.off < s.total) {
        size_t n;
        if (s.off < s.bytes) {
          const uint8_t* src = s.p + s.off;
          size_t len = std::min(s.bytes - s.off, kMaxChunk);
          if (scattered_ && !s.single_copy) scattered_->map(src, len);
          n = send_or_wait_for_space(s.link, src, len);
        } else {
          n = send_or_wait_for_space(s.link, nullptr, s.total - s.off);  // alignment padding
        }
        if (n == 0) break;
        s.off += n;
        moved = true;
        if (n >= kMaxChunk) break;  // let the receiver start on this piece
      }
      if (s.off == s.total) s.link->wait_for_space(false);
      if (moved) {
        notify_written(s.peer, s.link);
        progress = true;
      }
      if (s.off == s.total && s.link->flush() &&
          (!s.single_copy || s.single_copy->copied_by_peer() >= s.await_copied)) {
        s.done = true;
        progress = true;
        --pending;
      } else if (s.shared_source && s.off == s.total &&
                 push_shared_copy(s.single_copy, s.peer, s.await_copied, s.shared_source, s.message_bytes)) {
        progress = true;
        pushed = true;
      }
    }
    for (auto& r : rs) {
      if (r.done) continue;
      bool moved = r.single_copy ? receive_single_copy(r.link, r.single_copy, *r.spec, r.esize, r.at, !pushed)
                                 : receive_through_ring(r.link, *r.spec, r.esize, r.total, r.off);
      if (moved) {
        r.link->notify_space_freed();
        progress = true;
      }
      if (r.single_copy ? r.at.read == r.spec->bytes && r.at.stream % r.link->alignment() == 0 : r.off == r.total) {
        if (r.single_copy) {
          r.single_copy->mark_copied(r.spec->bytes);
          single_copy_bytes_.fetch_add(static_cast<int64_t>(r.spec->bytes), std::memory_order_relaxed);
        }
        r.done = true;
        progress = true;
        --pending;
      }
    }
    if (pending == 0) break;
    if (progress) {
      spins = 0;
      idle_since = 0;
      continue;
    }
    progress_control();  // keep control traffic flowing so peers are never starved of responses
    wait_in_exchange(token, peers, idle_since, spins);
  }
}

void Transport::fold_received(const RecvSpec& spec, uint8_t* dst, const uint8_t* local, const uint8_t* incoming,
                              size_t count) {
  if (spec.incoming_first) reduce_buffers(dst, incoming, local, count, spec.dtype, spec.op);
  else reduce_buffers(dst, local, incoming, count, spec.dtype, spec.op);
  scale_buffer(dst, count, spec.dtype, spec.postscale);
}

void Transport::locate_received(const RecvSpec& spec, size_t off, size_t& k, uint8_t** dst,
                                const uint8_t** local) const {
  *dst = static_cast<uint8_t*>(spec.dest) + off;
  *local = spec.local ? static_cast<const uint8_t*>(spec.local) + off : nullptr;
  if (scattered_) {  // (pieces hold whole elements: cutting at their ends keeps k whole)
    scattered_->map(*dst, k);
    if (*local) scattered_->map(*local, k);
  }
  if (!*local) *local = *dst;
}

bool Transport::receive_through_ring(PeerLink* link, const RecvSpec& spec, size_t esize, size_t total, size_t& off) {
  bool moved = false;
  while (off < total) {
    auto span = link->peek();
    if (span.second == 0) break;
    size_t k;
    if (off < spec.bytes) {
      k = std::min(span.second, spec.bytes - off);
      uint8_t* dst;
      const uint8_t* local;
      locate_received(spec, off, k, &dst, &local);
      k -= k % esize;
      if (k == 0) break;  // wait for the rest of a partial element
      if (spec.mode == RecvMode::kCopy) {
        std::memcpy(dst, span.first, k);
      } else {
        fold_received(spec, dst, local, span.first, k / esize);
      }
    } else {
      k = std::min(span.second, total - off);
    }
    link->consume(k);
    off += k;
    moved = true;
  }
  return moved;
}

void Transport::post_control(int peer, std::string msg) {
  if (gone_[peer]) return;  // nobody is listening any more
  uint32_t n = static_cast<uint32_t>(msg.size());
  std::string framed(reinterpret_cast<const char*>(&n), 4);
  framed += msg;
  queues_[peer].out.push_back(std::move(framed));
}

bool Transport::pop_control(int peer, std::string* msg) {
  auto& q = queues_[peer];
  if (q.ready.empty()) return false;
  *msg = std::move(q.ready.front());
  q.ready.pop_front();
  return true;
}

bool Transport::has_unsent_control() const {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && !gone_[p] && (!queues_[p].out.empty() || (ctrl_[p] && ctrl_[p]->holds_unsent()))) return true;
  return false;
}

bool Transport::progress_control() {
  bool progress = false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !ctrl_[p]) continue;
    auto& q = queues_[p];
    PeerLink* l = ctrl_[p].get();
    bool sent = false;
    while (!q.out.empty() && !gone_[p]) {
      const std::string& m = q.out.front();
      size_t n;
      try {
        n = send_or_wait_for_space(l, reinterpret_cast<const uint8_t*>(m.data()) + q.out_off, m.size() - q.out_off);
      } catch (const DataAlteredError&) {
        throw;
      } catch (const TransportError&) {
        break;  // the liveness socket reports the peer's fate
      }
      if (n == 0) break;
      q.out_off += n;
      sent = true;
      if (q.out_off == m.size()) {
        q.out.pop_front();
        q.out_off = 0;
      }
    }
    bool received = false;
    for (;;) {
      std::pair<const uint8_t*, size_t> span;
      try {
        span = l->peek();
      } catch (const DataAlteredError&) {
        throw;
      } catch (const TransportError&) {
        break;
      }
      if (span.second == 0) break;
      q.in.append(reinterpret_cast<const char*>(span.first), span.second);
      l->consume(span.second);
      received = true;
    }
    size_t pos = 0;
    while (q.in.size() - pos >= 4) {
      uint32_t n;
      std::memcpy(&n, q.in.data() + pos, 4);
      if (q.in.size() - pos - 4 < n) break;
      q.ready.emplace_back(q.in, pos + 4, n);
      pos += 4 + n;
    }
    if (pos) q.in.erase(0, pos);
    if (q.out.empty()) l->wait_for_space(false);
    try {
      l->flush();
    } catch (const TransportError&) {
      // as above: the liveness socket reports the peer's fate
    }
    if (sent) notify_written(p, l);
    if (received) l->notify_space_freed();
    progress = progress || sent || received;
  }
  return progress;
}

std::string Transport::explain(const std::string& error) {
  // A peer's verdict (its failure text, or the end of its liveness socket) may trail the error
  // by a moment: the sockets close together but are read separately. Wait for it briefly.
  std::vector<int> gone;
  for (int i = 0; i < 20 && size_ > 1 && !closed_; ++i) {
    check_peers(&gone);
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !peer_failure_[p].empty() && error.find(peer_failure_[p]) == std::string::npos)
        return error + " (" + describe(p) + " failed first: " + peer_failure_[p] + ")";
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && gone_[p] == 2 && error.find(describe(p)) == std::string::npos)
        return error + " (" + describe(p) + " " + fate(p) + ")";
    usleep(10000);
  }
  return error;
}

void Transport::close() {
  if (closed_) return;
  closed_ = true;
  // Flush what we owe peers (bounded), then say goodbye so they know this was no crash. (Nothing
  // to flush when connect() never ran: hvd.init() failed between creating and starting.)
  for (int i = 0; i < 200 && size_ > 1 && static_cast<int>(queues_.size()) == size_; ++i) {
    try {
      progress_control();
    } catch (const TransportError&) {
      break;  // an altered frame (the error is already ours to send): say it below regardless
    }
    bool empty = true;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !gone_[p] && (!queues_[p].out.empty() || (ctrl_[p] && ctrl_[p]->holds_unsent()))) empty = false;
    if (empty) break;
    usleep(1000);
  }
  for (int p = 0; p < static_cast<int>(live_fd_.size()); ++p) {
    if (live_fd_[p] < 0) continue;
    std::string bye(1, kGoodbye);
    if (!failure_.empty()) bye = kFailed + failure_.substr(0, kMaxFailureText);
    ssize_t ignored = send(live_fd_[p], bye.data(), bye.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
    ::close(live_fd_[p]);
    live_fd_[p] = -1;
  }
  data_.clear();
  ctrl_.clear();
  my_bell_ = &private_bell_;
  shm_.reset();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

PeerGroup::PeerGroup(Transport* t, std::vector<int> ranks) : t_(t), ranks_(std::move(ranks)) {
  identity_ = static_cast<int>(ranks_.size()) == t->size();
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i] == t->rank()) my_index_ = static_cast<int>(i);
    identity_ = identity_ && ranks_[i] == static_cast<int>(i);
  }
}

bool PeerGroup::scatter_through(const ScatteredBuffer* b) {
  // Below this average piece size a TCP peer is better served from one contiguous buffer.
  constexpr size_t kMinTcpPieceBytes = 256 * 1024;
  if (b != nullptr && !b->start.empty() && b->bytes / b->start.size() < kMinTcpPieceBytes)
    for (int r : ranks_)
      if (r != t_->rank() && !t_->is_local(r)) return false;
  t_->scatter_through(b);
  return true;
}

std::pair<uint8_t*, size_t> ScatteredBuffer::resolve(const void* p) const {
  const size_t off = static_cast<size_t>(static_cast<const uint8_t*>(p) - base);
  // The last piece starting at or before off.
  const size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), off) - start.begin()) - 1;
  const size_t end = i + 1 < start.size() ? start[i + 1] : bytes;
  return {where[i] + (off - start[i]), end - off};
}

void PeerGroup::exchange(const std::vector<SendSpec>& sends, const std::vector<RecvSpec>& recvs) {
  if (identity_) {  // the global set: its indices are the ranks already
    t_->exchange(sends, recvs);
    return;
  }
  static thread_local std::vector<SendSpec> s;  // reused, as in Transport::exchange
  static thread_local std::vector<RecvSpec> r;
  s.assign(sends.begin(), sends.end());
  r.assign(recvs.begin(), recvs.end());
  for (auto& x : s) x.peer = ranks_.at(x.peer);
  for (auto& x : r) x.peer = ranks_.at(x.peer);
  t_->exchange(s, r);
}

}  // namespace hs
