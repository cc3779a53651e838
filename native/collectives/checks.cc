#include "collectives/checks.h"

#include <string>
#include "common/errors.h"

namespace hs {

void check_group(const Group& g, const char* who) {
  const int n = g.size();
  const int r = g.rank();
  if (n < 1 || r < 0 || r >= n) {
    throw CollectiveError(std::string(who) + ": invalid group (rank " + std::to_string(r) + " of size " +
                          std::to_string(n) + ")");
  }
}

void check_dtype(DataType dtype, const char* who) {
  const int code = int(dtype);
  if (code < 0 || code >= kNumDataTypes) {
    throw CollectiveError(std::string(who) + ": unknown dtype code " + std::to_string(code));
  }
}

void check_reduce_op(ReduceOp op, const char* who) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct: return;
    case ReduceOp::kAverage:
      throw CollectiveError(std::string(who) + ": op Average must be applied by the caller as Sum then scale");
    default:
      throw CollectiveError(std::string(who) + ": op " + reduce_op_name(op) + " (code " + std::to_string(int(op)) +
                            ") is not supported by this algorithm");
  }
}

void check_per_rank(const std::vector<size_t>& v, int n, const char* who, const char* what) {
  if (v.size() != size_t(n)) {
    throw CollectiveError(std::string(who) + ": " + what + " has " + std::to_string(v.size()) +
                          " entries for a group of " + std::to_string(n) + " ranks");
  }
}

void check_buffer(const void* p, size_t bytes, const char* who, const char* what) {
  if (p == nullptr && bytes > 0) {
    throw CollectiveError(std::string(who) + ": " + what + " is null but " + std::to_string(bytes) +
                          " bytes were requested");
  }
}

}  // namespace hs
