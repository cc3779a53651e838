// Errors are data, never a hang: mismatched requests fail on every rank naming the tensor and the
// ranks, bad requests fail at once, a rank that shuts down or stalls fails what needed it, and a
// rank process that dies makes the others' collectives fail quickly, naming it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;
using hs::ReduceOp;

hs::TensorRequest sum_of(const std::string& name, std::vector<float>& v) {
  return Rank::request(OpType::kAllreduce, name, v.data(), v.data(), DataType::kFloat32, {int64_t(v.size())});
}

void mismatches(Rank& k) {
  const int n = k.size(), r = k.rank();
  const bool odd = r == n - 1;
  const std::string last = "rank " + std::to_string(n - 1);
  std::vector<float> f(odd ? 5 : 4);
  k.failed_with(k.run(sum_of("m.shape", f)), {"'m.shape'", "shape", last, "[4]", "[5]"}, "shape mismatch");
  std::vector<double> d(4);
  auto dtype = odd ? Rank::request(OpType::kAllreduce, "m.dtype", d.data(), d.data(), DataType::kFloat64, {4})
                   : Rank::request(OpType::kAllreduce, "m.dtype", f.data(), f.data(), DataType::kFloat32, {4});
  k.failed_with(k.run(dtype), {"'m.dtype'", "float32", "float64", last}, "dtype mismatch");
  std::vector<float> g(4);
  auto op = sum_of("m.op", g);
  if (odd) op.meta.op = ReduceOp::kMax;
  k.failed_with(k.run(op), {"'m.op'", "Sum", "Max", last}, "reduce op mismatch");
  auto root = Rank::request(OpType::kBroadcast, "m.root", g.data(), g.data(), DataType::kFloat32, {4});
  root.meta.root = odd ? 1 : 0;
  k.failed_with(k.run(root), {"'m.root'", "root", last}, "broadcast root mismatch");
  auto kind = odd ? Rank::request(OpType::kAllgather, "m.kind", g.data(), nullptr, DataType::kFloat32, {4})
                  : sum_of("m.kind", g);
  k.failed_with(k.run(kind), {"'m.kind'", "allgather", last}, "operation mismatch");
  // Bad in the same way on every rank.
  auto out_of_range = Rank::request(OpType::kBroadcast, "bad.root", g.data(), g.data(), DataType::kFloat32, {4});
  out_of_range.meta.root = n;
  k.failed_with(k.run(out_of_range), {"'bad.root'", "root_rank"}, "broadcast root out of range");
  std::vector<uint8_t> flags(4);
  auto bool_avg = Rank::request(OpType::kAllreduce, "bad.bool", flags.data(), flags.data(), DataType::kBool, {4});
  bool_avg.meta.op = ReduceOp::kAverage;
  k.failed_with(k.run(bool_avg), {"'bad.bool'", "bool"}, "Average of bool");
  std::vector<int32_t> ints(4, 1);
  auto adasum = Rank::request(OpType::kAllreduce, "bad.adasum", ints.data(), ints.data(), DataType::kInt32, {4});
  adasum.meta.op = ReduceOp::kAdasum;
  k.failed_with(k.run(adasum), {"'bad.adasum'", "Adasum", "floating-point"}, "Adasum of integers");
  std::vector<float> rows(size_t(n + 1));
  k.failed_with(
      k.run(Rank::request(OpType::kAlltoall, "bad.a2a", rows.data(), nullptr, DataType::kFloat32, {int64_t(n + 1)})),
      {"'bad.a2a'", "splits"}, "alltoall whose rows do not divide");
  // Refused without negotiation: an unknown process set, a name already in flight.
  k.failed_with(k.run(Rank::request(OpType::kAllreduce, "bad.set", g.data(), g.data(), DataType::kFloat32, {4}, 77)),
                {"unknown process set id 77"}, "unknown process set");
  std::vector<float> slow(4, 1.f);
  const int64_t first = r == 0 ? k.submit(sum_of("dup", slow)) : 0;
  if (r == 0) {  // the others have not submitted "dup" yet, so it is still in flight here
    std::string refused;
    try {
      k.submit(sum_of("dup", g));
    } catch (const std::invalid_argument& e) {
      refused = e.what();  // refused by the call itself, as Horovod raises ValueError
    }
    k.expect(contains(refused, "'dup'") && contains(refused, "already in flight"),
             "duplicate name: enqueue did not refuse it (got '" + refused + "')");
  }
  k.sync();
  Outcome o = r == 0 ? k.wait(first) : k.run(sum_of("dup", slow));
  if (k.succeeded(o, "dup")) k.expect(slow == std::vector<float>(4, float(n)), "dup: wrong values");
  // After all that the engine works as before.
  std::vector<float> ok(100, float(r));
  if (k.succeeded(k.run(sum_of("after.errors", ok)), "allreduce after the errors"))
    k.expect(ok == std::vector<float>(100, float(n * (n - 1) / 2)), "allreduce after the errors: wrong values");
}

// The last rank never submits: past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS the others' handles
// fail, naming the tensor and the missing rank.
void stall_shutdown(Rank& k) {
  const int n = k.size();
  std::vector<float> x(4);
  if (k.rank() != n - 1)
    k.failed_with(k.run(sum_of("stalled", x)), {"'stalled'", "[" + std::to_string(n - 1) + "]"}, "stalled allreduce");
  k.sync();
  std::vector<float> y(4, 1.f);
  if (k.succeeded(k.run(sum_of("after.stall", y)), "allreduce after the stall"))
    k.expect(y == std::vector<float>(4, float(n)), "allreduce after the stall: wrong values");
}

// The last rank shuts down (saying goodbye) while the others wait for it: their handles fail
// naming it, and later requests that need it fail at once.
void early_shutdown(Rank& k) {
  const int n = k.size();
  std::vector<float> x(4);
  if (k.rank() == n - 1) {
    k.sync();  // the others have submitted
    k.engine().shutdown();
    return;
  }
  const int64_t h = k.submit(sum_of("orphan", x));
  k.sync();
  const std::string who = "rank " + std::to_string(n - 1);
  k.failed_with(k.wait(h), {"'orphan'", who, "shut down"}, "allreduce beside a rank that shut down");
  k.failed_with(k.run(sum_of("later", x)), {who, "shut down"}, "allreduce after a rank shut down");
}

// shutdown() on one thread while another waits on a handle that cannot complete (the other ranks
// never submit it): the waiter gets the shut-down error, nothing hangs.
void shutdown_while_waiting(Rank& k) {
  std::vector<float> x(4);
  if (k.rank() == 0) {
    Outcome o;
    std::thread waiter([&] { o = k.run(sum_of("never", x)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (the waiter drives the engine by now)
    k.engine().shutdown();
    waiter.join();
    k.failed_with(o, {"shut down"}, "a wait across shutdown()");
  }
}

// A process set is removed while rank 0's tensor in it still waits (rank 1 never sends it), then
// rank 2 leaves: the removed set must stay unknown on rank 0, not come back empty.
void set_removed_then_rank_leaves(Rank& k) {
  auto add = Rank::request(OpType::kAddProcessSet, "__add_process_set__.1", nullptr, nullptr, DataType::kUInt8, {});
  add.meta.splits = {0, 1};
  Outcome a = k.run(add);
  if (!k.succeeded(a, "add_process_set")) return;
  const int32_t set = a.result.value;
  std::vector<float> x(4);
  const int64_t waiting =
      k.rank() == 0 ? k.submit(Rank::request(OpType::kAllreduce, "x", x.data(), x.data(), DataType::kFloat32, {4}, set))
                    : 0;
  auto remove =
      Rank::request(OpType::kRemoveProcessSet, "__remove_process_set__.1", nullptr, nullptr, DataType::kUInt8, {});
  remove.meta.root = set;
  k.succeeded(k.run(remove), "remove_process_set");
  k.sync();
  if (k.rank() == 2) k.engine().shutdown();
  k.sync();
  if (k.rank() != 0) return;
  // This global allreduce fails once the engine has seen rank 2's goodbye and failed what needed it.
  k.failed_with(k.run(sum_of("probe", x)), {"rank 2", "shut down"}, "allreduce after rank 2 left");
  std::vector<int32_t> ids = k.engine().process_set_ids();
  k.expect(std::find(ids.begin(), ids.end(), set) == ids.end(), "the removed process set is listed again");
  k.failed_with(k.run(Rank::request(OpType::kAllreduce, "y", x.data(), x.data(), DataType::kFloat32, {4}, set)),
                {"unknown process set"}, "allreduce in the removed set");
  k.expect(!k.engine().handles().poll(waiting), "the tensor of the removed set completed");
}

// Rank processes (fork) of which the last one exits without a word mid-job: the survivors' next
// collective fails within seconds, naming the dead rank, and their engines report it on later calls.
int death_rank(int r, int n, int ready_fd, int peers_fd) {
  hs::Config cfg = test_config();
  hs::Engine e(r, n, cfg);
  const int port = e.listen_port();
  if (write(ready_fd, &port, sizeof port) != sizeof port) return 10;
  std::vector<int> ports(static_cast<size_t>(n));
  if (read(peers_fd, ports.data(), sizeof(int) * size_t(n)) != ssize_t(sizeof(int) * size_t(n))) return 11;
  std::vector<hs::PeerAddress> peers;
  for (int q = 0; q < n; ++q) peers.push_back({"127.0.0.1", ports[size_t(q)], q == 1 ? "b" : "a"});  // shm and TCP
  e.start(peers, "death" + std::to_string(getppid()));
  Rank k(e, r, n);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> v(64, float(r));
    if (k.succeeded(k.run(sum_of("alive", v)), "allreduce before the death"))
      k.expect(v[0] == float(n * (n - 1) / 2), "allreduce before the death: wrong values");
  }
  if (r == n - 1) std::_Exit(0);  // no goodbye, no shutdown: as a killed process
  std::vector<float> v(64);
  const auto start = std::chrono::steady_clock::now();
  Outcome o = k.run(sum_of("after.death", v));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string who = "rank " + std::to_string(n - 1);
  k.failed_with(o, {who, "exited unexpectedly"}, "allreduce after a peer died");
  k.expect(took < 20, "the failure took " + std::to_string(took) + " s to show");
  k.failed_with(k.run(sum_of("later", v)), {who}, "allreduce on an engine that lost a peer");
  e.shutdown();
  return failures() == 0 ? 0 : 1;
}

}  // namespace

void scenario_failures() {
  for (const Topology& t : topologies()) {
    std::fprintf(stderr, "  mismatches and bad requests on %s\n", t.name);
    Job(t.host_ids).run(mismatches);
    std::fprintf(stderr, "  a rank that shuts down early on %s\n", t.name);
    Job(t.host_ids).run(early_shutdown);
  }
  std::fprintf(stderr, "  shutdown() while another thread waits\n");
  Job({"h", "h", "b"}).run(shutdown_while_waiting);
  std::fprintf(stderr, "  a process set removed while its tensor waits, then a rank leaves\n");
  Job({"h", "h", "h"}).run(set_removed_then_rank_leaves);
  hs::Config cfg = test_config();
  cfg.stall_check_disable = false;
  cfg.stall_check_seconds = 60;
  cfg.stall_shutdown_seconds = 1;
  std::fprintf(stderr, "  a rank that never submits (stall shutdown)\n");
  Job({"h", "h", "b"}, cfg).run(stall_shutdown);
}

// Runs before any thread exists in this process (fork and threads do not mix), so its deadline is
// an alarm in each process instead of a Watchdog thread.
void scenario_death() {
  const int n = 3;
  alarm(150);
  std::fprintf(stderr, "  a rank process that dies (3 processes, shm and TCP)\n");
  std::vector<int> ready(size_t(2 * n)), peers(size_t(2 * n));
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    if (pipe(&ready[size_t(2 * r)]) != 0 || pipe(&peers[size_t(2 * r)]) != 0) {
      expect(false, r, "pipe failed");
      return;
    }
    pid_t pid = fork();
    if (pid == 0) {
      alarm(120);  // this process's own deadline (a fork does not inherit the parent's)
      int rc = 12;
      try {
        rc = death_rank(r, n, ready[size_t(2 * r + 1)], peers[size_t(2 * r)]);
      } catch (const std::exception& ex) {
        expect(false, r, std::string("threw: ") + ex.what());
      }
      std::fflush(stderr);
      std::exit(rc);  // (exit, not _Exit: sanitizers report leaks and errors at exit)
    }
    pids.push_back(pid);
  }
  std::vector<int> ports;
  for (int r = 0; r < n; ++r) {
    int port = 0;
    if (!expect(read(ready[size_t(2 * r)], &port, sizeof port) == sizeof port, r, "no port from the rank process"))
      port = 0;
    ports.push_back(port);
  }
  for (int r = 0; r < n; ++r)
    if (write(peers[size_t(2 * r + 1)], ports.data(), sizeof(int) * size_t(n)) < 0) expect(false, r, "write failed");
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[size_t(r)], &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, r,
           "rank process ended with " + (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                           : "signal " + std::to_string(WTERMSIG(status))));
  }
}

}  // namespace hs_test
