// Exceptions that cross the engine: a setting it cannot use, a peer that vanished and a collective
// that cannot run.
#pragma once
#include <stdexcept>
#include <string>

namespace hs {

// An environment variable holds a value the core cannot use; the message names the variable, the
// value and what it accepts (Python: horovod_spark.exceptions.ConfigError, a ValueError).
struct ConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The transport lost a peer (exit, crash, closed socket) or timed out on it. Fatal for the engine.
struct TransportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A frame on an authenticated link failed its check (transport/tcp_link.h): never a lost peer to
// wait out, always fatal at once.
struct DataAlteredError : TransportError {
  using TransportError::TransportError;
};

// A request that is wrong (mismatched shapes across ranks, bad root, bad splits): fails that
// tensor's handles on every rank, the engine keeps running.
struct CollectiveError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace hs
