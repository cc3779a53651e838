// The core's settings, read once from the environment with Horovod's variable names so a
// migrating user's settings keep working.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {

// A setting that is on, off, or left to the core to decide (unset or "auto").
enum class Switch { kAuto, kOff, kOn };

struct Config {
  size_t fusion_threshold = size_t(128) << 20;  // HOROVOD_FUSION_THRESHOLD (bytes)
  double cycle_time_ms = 1.0;                   // HOROVOD_CYCLE_TIME: longest idle sleep
  size_t cache_capacity = 1024;                 // HOROVOD_CACHE_CAPACITY (0 disables)
  double stall_check_seconds = 60;              // HOROVOD_STALL_CHECK_TIME_SECONDS
  double stall_shutdown_seconds = 0;            // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0: never)
  bool stall_check_disable = false;             // HOROVOD_STALL_CHECK_DISABLE
  double process_set_timeout_seconds = 120;     // HOROVOD_PROCESS_SET_TIMEOUT: add/remove_process_set
  std::string timeline_path;                    // HOROVOD_TIMELINE
  bool timeline_mark_cycles = false;            // HOROVOD_TIMELINE_MARK_CYCLES
  double data_timeout_seconds = 600;            // HOROVOD_DATA_TIMEOUT_SECONDS
  double start_timeout_seconds = 120;           // HOROVOD_START_TIMEOUT
  bool shm_disable = false;                     // HOROVOD_SHM_DISABLE
  bool data_plane_auth = false;                 // HOROVOD_SPARK_DATA_PLANE_AUTH (default: HOROVOD_SPARK_TLS)
  bool yield_when_idle = false;                 // HOROVOD_YIELD_WHEN_IDLE: never spin while waiting
  size_t shm_ring_bytes = size_t(4) << 20;      // HOROVOD_SHM_RING_BYTES
  size_t shm_single_copy_bytes = size_t(1) << 19;  // HOROVOD_SHM_SINGLE_COPY_BYTES (0 disables)
  bool speculative_allreduce = true;            // HOROVOD_SPECULATIVE_ALLREDUCE (0 disables)
  Switch hierarchical_allreduce = Switch::kAuto;  // HOROVOD_HIERARCHICAL_ALLREDUCE (rule: HostLayout::applies)
  Switch hierarchical_allgather = Switch::kAuto;  // HOROVOD_HIERARCHICAL_ALLGATHER
  bool autotune = false;                        // HOROVOD_AUTOTUNE (engine/autotune.h)
  std::string autotune_log;                     // HOROVOD_AUTOTUNE_LOG: CSV of the trials (rank 0)
  int autotune_warmup_samples = 3;              // HOROVOD_AUTOTUNE_WARMUP_SAMPLES: discarded first
  int autotune_steps_per_sample = 10;           // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE: cycles per sample

  static Config from_env();  // throws ConfigError (common/errors.h) naming the bad variable
  static const char* switch_name(Switch s);  // "auto", "off", "on"
};

}  // namespace hs
