#include "common/config.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "common/errors.h"

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
    throw ConfigError(std::string(name) + "='" + v + "' is not a number >= " + std::to_string(min_value) +
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
    throw ConfigError(std::string(name) + "='" + v + "' is not a whole number from " + std::to_string(min_value) +
                      " to 1000000; unset it or give a valid value");
  return static_cast<int>(n);
}

// The flag grammar of horovod_spark/common/config.py (FLAG), so that a value means the same to the
// core as to Python: these words in any letter case, surrounding spaces ignored. Anything else is
// refused rather than read as on, because a word such as "off" must never turn a flag on.
const char* const kFlagAccepts = "1, true, yes or on to turn it on; 0, false, no or off to turn it off";

std::string normalized_word(const char* v) {
  std::string s(v);
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  std::string word = s.substr(begin, end - begin);
  for (char& ch : word) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return word;
}

// 1 for an on word, 0 for an off word, -1 for anything else.
int flag_word(const std::string& word) {
  if (word == "1" || word == "true" || word == "yes" || word == "on") return 1;
  if (word == "0" || word == "false" || word == "no" || word == "off") return 0;
  return -1;
}

bool env_flag(const char* name, bool fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  int on = flag_word(normalized_word(v));
  if (on < 0)
    throw ConfigError(std::string(name) + "='" + v + "' is neither on nor off; set it to " + kFlagAccepts +
                      ", or unset it (default: " + (fallback ? "on" : "off") + ")");
  return on == 1;
}

// A flag that may also be left to the core: unset or "auto" (any letter case).
Switch env_switch(const char* name) {
  const char* v = env(name);
  if (!v) return Switch::kAuto;
  std::string word = normalized_word(v);
  if (word == "auto") return Switch::kAuto;
  int on = flag_word(word);
  if (on < 0)
    throw ConfigError(std::string(name) + "='" + v + "' is neither auto, on nor off; set it to auto (or unset) " +
                      "to let the core choose; " + kFlagAccepts + ", or unset it (default: auto)");
  return on == 1 ? Switch::kOn : Switch::kOff;
}
// HOROVOD_SPARK_DATA_PLANE_AUTH, a flag whose default is HOROVOD_SPARK_TLS's value: authenticated
// TCP frames come with TLS unless set either way (transport/tcp_link.h).
bool data_plane_auth_flag() {
  const char* name = "HOROVOD_SPARK_DATA_PLANE_AUTH";
  const char* v = env(name);
  if (!v) return env_flag("HOROVOD_SPARK_TLS", false);
  int on = flag_word(normalized_word(v));
  if (on < 0)
    throw ConfigError(std::string(name) + "='" + v + "' is neither on nor off; set it to " + kFlagAccepts +
                      ", or unset it (default: on when HOROVOD_SPARK_TLS is on, else off)");
  return on == 1;
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
  c.stall_check_disable = env_flag("HOROVOD_STALL_CHECK_DISABLE", c.stall_check_disable);
  c.process_set_timeout_seconds = env_number("HOROVOD_PROCESS_SET_TIMEOUT", c.process_set_timeout_seconds, 1);
  if (const char* t = env("HOROVOD_TIMELINE")) c.timeline_path = t;
  c.timeline_mark_cycles = env_flag("HOROVOD_TIMELINE_MARK_CYCLES", c.timeline_mark_cycles);
  c.data_timeout_seconds = env_number("HOROVOD_DATA_TIMEOUT_SECONDS", c.data_timeout_seconds, 1);
  c.start_timeout_seconds = env_number("HOROVOD_START_TIMEOUT", c.start_timeout_seconds, 1);
  c.shm_disable = env_flag("HOROVOD_SHM_DISABLE", c.shm_disable);
  c.data_plane_auth = data_plane_auth_flag();
  c.yield_when_idle = env_flag("HOROVOD_YIELD_WHEN_IDLE", c.yield_when_idle);
  c.speculative_allreduce = env_flag("HOROVOD_SPECULATIVE_ALLREDUCE", c.speculative_allreduce);
  c.shm_ring_bytes =
      static_cast<size_t>(env_number("HOROVOD_SHM_RING_BYTES", static_cast<double>(c.shm_ring_bytes), 65536));
  c.shm_ring_bytes = c.shm_ring_bytes / 4096 * 4096;
  c.shm_single_copy_bytes =
      static_cast<size_t>(env_number("HOROVOD_SHM_SINGLE_COPY_BYTES", static_cast<double>(c.shm_single_copy_bytes), 0));
  c.hierarchical_allreduce = env_switch("HOROVOD_HIERARCHICAL_ALLREDUCE");
  c.hierarchical_allgather = env_switch("HOROVOD_HIERARCHICAL_ALLGATHER");
  c.autotune = env_flag("HOROVOD_AUTOTUNE", c.autotune);
  if (const char* t = env("HOROVOD_AUTOTUNE_LOG")) c.autotune_log = t;
  c.autotune_warmup_samples = env_count("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", c.autotune_warmup_samples, 0);
  c.autotune_steps_per_sample = env_count("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", c.autotune_steps_per_sample, 1);
  return c;
}

}  // namespace hs
