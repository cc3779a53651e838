// Device (NCCL) requests through the engine, on any machine: their negotiation (ranks that disagree
// on GPU vs host memory, joined ranks) and what a rank without the NCCL data plane's libraries
// does with an agreed one. No buffer is touched on these paths, so host memory stands in for
// device memory. The NCCL collectives themselves run in tests/gpu/test_torch_nccl.py.
#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace hs_test {

namespace {

using hs::DataType;
using hs::OpType;

hs::TensorRequest on_device(hs::TensorRequest req) {
  req.meta.device = true;
  req.device = 0;
  return req;
}

hs::TensorRequest sum_of(const std::string& name, std::vector<float>& v) {
  return Rank::request(OpType::kAllreduce, name, v.data(), v.data(), DataType::kFloat32, {int64_t(v.size())});
}

void device_negotiation(Rank& k) {
  const int n = k.size(), r = k.rank();
  std::vector<float> x(6, float(r + 1));
  // The last rank stages through host memory, the others ask for NCCL: refused everywhere, by name.
  auto mixed = r == n - 1 ? sum_of("mixed", x) : on_device(sum_of("mixed", x));
  k.failed_with(k.run(mixed), {"'mixed'", "on the GPU through NCCL", "through host memory", "HOROVOD_GPU_OPERATIONS"},
                "device on some ranks, host on others");
  // Agreed, but this process never loaded libnccl: every rank fails alike, the engine goes on.
  for (OpType t : {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather}) {
    auto req = on_device(
        Rank::request(t, std::string("agreed.") + hs::op_type_name(t), x.data(), x.data(), DataType::kFloat32, {6}));
    k.failed_with(k.run(req), {"NCCL data plane unavailable"}, std::string("device ") + hs::op_type_name(t));
  }
  std::fill(x.begin(), x.end(), float(r + 1));
  if (k.succeeded(k.run(sum_of("after", x)), "host allreduce after the device requests"))
    k.expect(x == std::vector<float>(6, float(n * (n + 1) / 2)), "host allreduce after the device requests: values");
}

void device_after_join(Rank& k) {
  if (k.rank() != 0) {
    k.run(Rank::request(OpType::kJoin, "join", nullptr, nullptr, DataType::kUInt8, {}));
    return;
  }
  std::vector<float> x(4, 1.f);
  k.failed_with(k.run(on_device(sum_of("joined", x))), {"'joined'", "join()", "HOROVOD_GPU_OPERATIONS=HOST"},
                "device allreduce after the others joined");
  k.run(Rank::request(OpType::kJoin, "join", nullptr, nullptr, DataType::kUInt8, {}));
}

}  // namespace

void scenario_device() {
  for (const Topology& t : topologies()) {
    std::fprintf(stderr, "  device requests on %s\n", t.name);
    Job(t.host_ids).run([](Rank& k) {
      device_negotiation(k);
      device_after_join(k);
    });
  }
}

}  // namespace hs_test
