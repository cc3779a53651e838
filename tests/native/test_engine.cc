// Multi-rank tests of the whole native engine (engine_ranks.h: ranks are threads with real
// Engines over loopback TCP and shared memory). Usage: test_engine [scenario...] [--timeline PATH]
// with scenarios from the table below (default: all but death, which forks and so must run in a
// process without threads: `test_engine death` on its own). Exit status 0 when every check passed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine_ranks.h"
#include "engine_scenarios.h"

namespace {

struct Scenario {
  const char* name;
  std::function<void()> run;
  int deadline_s;  // generous: sanitizers slow everything down on a small machine
};

}  // namespace

int main(int argc, char** argv) {
  std::string timeline = "/tmp/hs_test_engine_timeline." + std::to_string(::getpid()) + ".json";
  std::vector<std::string> wanted;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timeline") == 0 && i + 1 < argc) {
      timeline = argv[++i];
    } else {
      wanted.push_back(argv[i]);
    }
  }
  const std::vector<Scenario> scenarios = {
      {"collectives", hs_test::scenario_collectives, 300},
      {"hierarchical", hs_test::scenario_hierarchical, 300},
      {"cached_lane", hs_test::scenario_cached_lane, 300},
      {"join", hs_test::scenario_join, 300},
      {"process_sets", hs_test::scenario_process_sets, 300},
      {"threads", [&] { hs_test::scenario_threads(timeline); }, 300},
      {"failures", hs_test::scenario_failures, 300},
      {"links", hs_test::scenario_links, 120},
      {"admission", hs_test::scenario_admission, 180},
      {"autotune", hs_test::scenario_autotune, 300},
      {"device", hs_test::scenario_device, 120},
      {"death", hs_test::scenario_death, 0},
  };
  if (wanted.empty())
    for (const auto& s : scenarios)
      if (std::strcmp(s.name, "death") != 0) wanted.push_back(s.name);
  for (const auto& w : wanted) {
    bool known = false;
    for (const auto& s : scenarios) known = known || w == s.name;
    if (!known) {
      std::fprintf(stderr, "unknown scenario '%s'; scenarios:", w.c_str());
      for (const auto& s : scenarios) std::fprintf(stderr, " %s", s.name);
      std::fprintf(stderr, "\n");
      return 2;
    }
    if (w == "death" && wanted.size() > 1) {
      std::fprintf(stderr, "run the death scenario on its own: it forks, and other scenarios leave threads behind\n");
      return 2;
    }
  }
  for (const auto& s : scenarios) {
    if (std::find(wanted.begin(), wanted.end(), s.name) == wanted.end()) continue;
    const auto start = std::chrono::steady_clock::now();
    std::fprintf(stderr, "%s\n", s.name);
    if (s.deadline_s > 0) {
      hs_test::Watchdog watchdog(s.name, s.deadline_s);
      s.run();
    } else {
      s.run();
    }
    std::fprintf(stderr, "%s: %.1f s\n", s.name,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::remove(timeline.c_str());
  std::printf("%ld checks, %d failures\n", hs_test::checks().load(), hs_test::failures().load());
  return hs_test::failures() == 0 ? 0 : 1;
}
