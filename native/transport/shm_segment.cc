#include "transport/shm_segment.h"

#include "transport/asymmetric_fence.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/errors.h"
#include "transport/asymmetric_fence.h"
#include "transport/single_copy.h"

namespace hs {

namespace {
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string errno_text(const char* what, const std::string& name) {
  return std::string(what) + " shared memory segment " + name + ": " + std::strerror(errno);
}
}  // namespace

ShmSegment::ShmSegment(const std::string& name, int local_size, size_t data_bytes, size_t ctrl_bytes)
    : name_(name), local_size_(local_size), data_bytes_(data_bytes), ctrl_bytes_(ctrl_bytes) {}

size_t ShmSegment::total_bytes() const {
  size_t pairs = static_cast<size_t>(local_size_) * local_size_;
  return align_up(sizeof(Doorbell) * local_size_, 4096) + pairs * (2 * sizeof(RingHeader) + data_bytes_ + ctrl_bytes_);
}

size_t ShmSegment::ring_offset(bool control, int from, int to) const {
  size_t pair = static_cast<size_t>(from) * local_size_ + to;
  size_t per_pair = 2 * sizeof(RingHeader) + data_bytes_ + ctrl_bytes_;
  size_t off = align_up(sizeof(Doorbell) * local_size_, 4096) + pair * per_pair;
  return control ? off + sizeof(RingHeader) + data_bytes_ : off;
}

Doorbell* ShmSegment::doorbell(int local_rank) { return reinterpret_cast<Doorbell*>(base_) + local_rank; }
RingHeader* ShmSegment::ring(bool control, int from, int to) {
  return reinterpret_cast<RingHeader*>(base_ + ring_offset(control, from, to));
}
uint8_t* ShmSegment::ring_data(bool control, int from, int to) {
  return base_ + ring_offset(control, from, to) + sizeof(RingHeader);
}

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name, int local_size, size_t data_bytes,
                                               size_t ctrl_bytes) {
  std::unique_ptr<ShmSegment> s(new ShmSegment(name, local_size, data_bytes, ctrl_bytes));
  shm_unlink(name.c_str());  // a leftover from a crashed job with the same name
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw TransportError(errno_text("cannot create", name));
  size_t total = s->total_bytes();
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw TransportError(errno_text("cannot size", name) + " (is /dev/shm large enough?)");
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    throw TransportError(errno_text("cannot map", name));
  }
  s->base_ = static_cast<uint8_t*>(p);
  // ftruncate gives zeroed pages, which is the initial state of every header; placement-new
  // makes the atomics' lifetime explicit.
  for (int i = 0; i < local_size; ++i) new (s->doorbell(i)) Doorbell{};
  for (int a = 0; a < local_size; ++a)
    for (int b = 0; b < local_size; ++b)
      for (bool c : {false, true}) new (s->ring(c, a, b)) RingHeader{};
  return s;
}

std::unique_ptr<ShmSegment> ShmSegment::attach(const std::string& name, int local_size, size_t data_bytes,
                                               size_t ctrl_bytes) {
  std::unique_ptr<ShmSegment> s(new ShmSegment(name, local_size, data_bytes, ctrl_bytes));
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw TransportError(errno_text("cannot open", name));
  size_t total = s->total_bytes();
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) throw TransportError(errno_text("cannot map", name));
  s->base_ = static_cast<uint8_t*>(p);
  s->unlinked_ = true;  // the creator unlinks
  return s;
}

void ShmSegment::unlink() {
  if (!unlinked_) shm_unlink(name_.c_str());
  unlinked_ = true;
}

ShmSegment::~ShmSegment() {
  unlink();
  if (base_) munmap(base_, total_bytes());
}

void doorbell_wait(Doorbell* d, uint32_t seen, int timeout_us, bool (*has_news)(void*), void* ctx) {
  d->sleeping.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with the light fence in doorbell_ring_if_sleeping: either the writer sees this sleeper,
  // or the look below sees what it wrote.
  heavy_fence();
  if (d->seq.load(std::memory_order_seq_cst) == seen && !(has_news && has_news(ctx))) {
    struct timespec ts;
    ts.tv_sec = timeout_us / 1000000;
    ts.tv_nsec = (timeout_us % 1000000) * 1000L;
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->seq), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  d->sleeping.fetch_sub(1, std::memory_order_relaxed);
}

void doorbell_ring(Doorbell* d) {
  d->seq.fetch_add(1, std::memory_order_seq_cst);
  if (d->sleeping.load(std::memory_order_seq_cst))
    // Wake every sleeper: a rank's engine thread and its waiting caller may both sleep on this
    // word, and waking only one can leave the caller asleep until its timeout while the peer
    // waits on it (millisecond stalls in the middle of a collective).
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&d->seq), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void doorbell_ring_if_sleeping(Doorbell* d) {
  light_fence();
  if (d->sleeping.load(std::memory_order_relaxed)) doorbell_ring(d);
}

ShmLink::ShmLink(ShmSegment* seg, bool control, int my_local, int peer_local)
    : out_(seg->ring(control, my_local, peer_local)),
      out_data_(seg->ring_data(control, my_local, peer_local)),
      in_(seg->ring(control, peer_local, my_local)),
      in_data_(seg->ring_data(control, peer_local, my_local)),
      cap_(seg->ring_bytes(control)),
      peer_bell_(seg->doorbell(peer_local)) {}

size_t ShmLink::try_send(const uint8_t* p, size_t n) {
  uint64_t head = out_->head.load(std::memory_order_relaxed);
  uint64_t tail = out_->tail.load(std::memory_order_acquire);
  size_t free_bytes = cap_ - static_cast<size_t>(head - tail);
  size_t pos = static_cast<size_t>(head % cap_);
  size_t k = std::min({n, free_bytes, cap_ - pos});
  if (k == 0) return 0;
  // p == nullptr sends padding: only the position moves.
  if (p) std::memcpy(out_data_ + pos, p, k);
  out_->head.store(head + k, std::memory_order_release);
  return k;
}

std::pair<const uint8_t*, size_t> ShmLink::peek() {
  uint64_t head = in_->head.load(std::memory_order_acquire);
  uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  size_t pos = static_cast<size_t>(tail % cap_);
  size_t k = std::min(static_cast<size_t>(head - tail), cap_ - pos);
  return {in_data_ + pos, k};
}

void ShmLink::consume(size_t n) {
  in_->tail.store(in_->tail.load(std::memory_order_relaxed) + n, std::memory_order_release);
}

// The two fences pair up (store then load on each side): either the writer's retry sees the
// new tail, or this load sees the writer's flag. Only the writer clears the flag.
void ShmLink::notify_space_freed() {
  light_fence();
  if (in_->writer_waits.load(std::memory_order_relaxed)) doorbell_ring_if_sleeping(peer_bell_);
}

uint64_t ShmLink::news_mark() const {
  // All only grow: their sum changes whenever one does.
  return in_->head.load(std::memory_order_acquire) + out_->tail.load(std::memory_order_acquire) +
         out_->copied.load(std::memory_order_acquire) + out_->share.offers.load(std::memory_order_acquire) +
         in_->share.pushed.load(std::memory_order_acquire);
}

void ShmLink::offer_copy_share(uint64_t dest, size_t bytes, size_t chunk) {
  CopyShare& s = in_->share;
  const uint64_t n = s.offers.load(std::memory_order_relaxed) + 1;
  s.message_end.store(in_->copied.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  s.dest.store(dest, std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.chunk.store(chunk, std::memory_order_relaxed);
  s.claims.store(pack_claims(n, 0, (bytes + chunk - 1) / chunk), std::memory_order_release);
  s.offers.store(n, std::memory_order_release);
  doorbell_ring_if_sleeping(peer_bell_);
}

bool ShmLink::claim_front_chunk(size_t* index) {
  CopyShare& s = in_->share;
  uint64_t c = s.claims.load(std::memory_order_relaxed);
  do {
    if (claims_front(c) >= claims_back(c)) return false;
  } while (!s.claims.compare_exchange_weak(c, pack_claims(claims_tag(c), claims_front(c) + 1, claims_back(c)),
                                           std::memory_order_relaxed));
  *index = claims_front(c);
  return true;
}

void ShmLink::withdraw_copy_share() {
  CopyShare& s = in_->share;
  uint64_t c = s.claims.load(std::memory_order_relaxed);
  while (claims_front(c) < claims_back(c) &&
         !s.claims.compare_exchange_weak(c, pack_claims(claims_tag(c), claims_back(c), claims_back(c)),
                                         std::memory_order_relaxed)) {
  }
}

bool ShmLink::claim_back_chunk(uint64_t message_end, size_t message_bytes, uint64_t* dest, size_t* offset,
                               size_t* bytes) {
  CopyShare& s = out_->share;
  // acquire: pairs with the offer's release store (and the release sequence of the claims after
  // it), so that the offer's fields below are this offer's.
  uint64_t c = s.claims.load(std::memory_order_acquire);
  if (claims_front(c) >= claims_back(c)) return false;
  // Only the offer for this message can have chunks left: an earlier one is exhausted before its
  // message completes, and a later one needs a message this sender has not sent yet.
  if (s.message_end.load(std::memory_order_relaxed) != message_end ||
      s.bytes.load(std::memory_order_relaxed) != message_bytes)
    return false;
  // A chunk past the message's end is never claimed here, so that no write reads beyond it.
  const size_t chunk = s.chunk.load(std::memory_order_relaxed);
  do {
    if (claims_front(c) >= claims_back(c) || chunk == 0 || (claims_back(c) - 1) * chunk >= message_bytes) return false;
  } while (!s.claims.compare_exchange_weak(c, pack_claims(claims_tag(c), claims_front(c), claims_back(c) - 1),
                                           std::memory_order_acquire));
  *dest = s.dest.load(std::memory_order_relaxed);
  *offset = (claims_back(c) - 1) * chunk;
  *bytes = std::min(chunk, message_bytes - *offset);
  return true;
}

void ShmLink::note_pushed(size_t bytes) {
  out_->share.pushed.fetch_add(bytes, std::memory_order_release);
  doorbell_ring_if_sleeping(peer_bell_);
}

void ShmLink::mark_copied(size_t bytes) {
  in_->copied.store(in_->copied.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
  doorbell_ring_if_sleeping(peer_bell_);
}

void ShmLink::wait_for_space(bool waiting) {
  if (waiting == told_waiting_) return;
  told_waiting_ = waiting;
  out_->writer_waits.store(waiting ? 1 : 0, std::memory_order_relaxed);
  if (waiting) heavy_fence();  // (pairs with notify_space_freed's light fence)
  else std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace hs
