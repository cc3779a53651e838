// The scenarios of test_engine.cc, each a separate group of jobs (see engine_ranks.h).
#pragma once
#include <string>

namespace hs_test {

void scenario_collectives();    // engine_collectives.cc
void scenario_hierarchical();   // engine_hierarchical.cc
void scenario_cached_lane();    // engine_negotiation.cc
void scenario_join();           // engine_negotiation.cc
void scenario_process_sets();   // engine_negotiation.cc
void scenario_threads(const std::string& timeline_path);  // engine_negotiation.cc
void scenario_failures();       // engine_failures.cc
void scenario_links();          // engine_links.cc
void scenario_shared_copy();    // engine_shared_copy.cc (run by scenario_links)
void scenario_wakeups();        // engine_wakeups.cc (run by scenario_links)
void scenario_admission();      // engine_admission.cc
void scenario_autotune();       // engine_autotune.cc
void scenario_device();         // engine_device.cc
void scenario_death();          // engine_failures.cc: forks rank processes; run it in a process of its own

}  // namespace hs_test
