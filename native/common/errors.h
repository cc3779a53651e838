// Exceptions that cross the engine: a peer that vanished and a collective that cannot run.
#pragma once
#include <stdexcept>
#include <string>

namespace hs {

// The transport lost a peer (exit, crash, closed socket) or timed out on it. Fatal for the engine.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A request that is wrong (mismatched shapes across ranks, bad root, bad splits): fails that
// tensor's handles on every rank, the engine keeps running.
struct CollectiveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace hs
