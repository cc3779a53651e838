#include "common/config.h"

#include <cstdlib>
#include <stdexcept>

namespace hs {

namespace {
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

double env_number(const char* name, double fallback, double min_value) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || d < min_value)
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a number >= " + std::to_string(min_value) +
                                "; unset it or give a valid value");
  return d;
}

// A whole number >= min_value, at most a million (counts of samples and cycles).
int env_count(const char* name, int fallback, int min_value) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < min_value || n > 1000000)
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a whole number from " +
                                std::to_string(min_value) + " to 1000000; unset it or give a valid value");
  return static_cast<int>(n);
}

bool env_flag(const char* name) {
  const char* v = env(name);
  if (!v) return false;
  std::string s(v);
  return !(s == "0" || s == "false" || s == "False" || s == "FALSE" || s == "no");
}

// A flag read as env_flag reads it, except that unset or "auto" leaves the choice to the core.
Switch env_switch(const char* name) {
  const char* v = env(name);
  if (!v || std::string(v) == "auto") return Switch::kAuto;
  return env_flag(name) ? Switch::kOn : Switch::kOff;
}
}  // namespace

const char* Config::switch_name(Switch s) { return s == Switch::kAuto ? "auto" : s == Switch::kOn ? "on" : "off"; }

Config Config::from_env() {
  Config c;
  c.fusion_threshold =
      static_cast<size_t>(env_number("HOROVOD_FUSION_THRESHOLD", static_cast<double>(c.fusion_threshold), 0));
  c.cycle_time_ms = env_number("HOROVOD_CYCLE_TIME", c.cycle_time_ms, 0);
  c.cache_capacity =
      static_cast<size_t>(env_number("HOROVOD_CACHE_CAPACITY", static_cast<double>(c.cache_capacity), 0));
  c.stall_check_seconds = env_number("HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall_check_seconds, 0);
  c.stall_shutdown_seconds = env_number("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds, 0);
  c.stall_check_disable = env_flag("HOROVOD_STALL_CHECK_DISABLE");
  c.process_set_timeout_seconds = env_number("HOROVOD_PROCESS_SET_TIMEOUT", c.process_set_timeout_seconds, 1);
  if (const char* t = env("HOROVOD_TIMELINE")) c.timeline_path = t;
  c.timeline_mark_cycles = env_flag("HOROVOD_TIMELINE_MARK_CYCLES");
  c.data_timeout_seconds = env_number("HOROVOD_DATA_TIMEOUT_SECONDS", c.data_timeout_seconds, 1);
  c.start_timeout_seconds = env_number("HOROVOD_START_TIMEOUT", c.start_timeout_seconds, 1);
  c.shm_disable = env_flag("HOROVOD_SHM_DISABLE");
  c.speculative_allreduce = !env("HOROVOD_SPECULATIVE_ALLREDUCE") || env_flag("HOROVOD_SPECULATIVE_ALLREDUCE");
  c.shm_ring_bytes =
      static_cast<size_t>(env_number("HOROVOD_SHM_RING_BYTES", static_cast<double>(c.shm_ring_bytes), 65536));
  c.shm_ring_bytes = c.shm_ring_bytes / 4096 * 4096;
  c.shm_single_copy_bytes =
      static_cast<size_t>(env_number("HOROVOD_SHM_SINGLE_COPY_BYTES", static_cast<double>(c.shm_single_copy_bytes), 0));
  c.hierarchical_allreduce = env_switch("HOROVOD_HIERARCHICAL_ALLREDUCE");
  c.hierarchical_allgather = env_switch("HOROVOD_HIERARCHICAL_ALLGATHER");
  c.autotune = env_flag("HOROVOD_AUTOTUNE");
  if (const char* t = env("HOROVOD_AUTOTUNE_LOG")) c.autotune_log = t;
  c.autotune_warmup_samples = env_count("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", c.autotune_warmup_samples, 0);
  c.autotune_steps_per_sample = env_count("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", c.autotune_steps_per_sample, 1);
  return c;
}

}  // namespace hs
