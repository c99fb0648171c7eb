// Flags of `outbox-relay reconcile` and its time bounds (--since, --until). Pure but for
// --kafka-config, which reads its file.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/lifecycle/options.hpp"

namespace outbox::app {

using lifecycle::format_utc;
using lifecycle::ReconcileOptions;
using lifecycle::TimeBound;

// The environment as the flag parsers see it: a variable's value, or nullopt when unset. Empty
// reads none (the unit tests' default); main passes getenv.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;

// "30m", "2h", "7d", "90s", "500ms" (an age), or a timestamp: "2026-11-30", "2026-11-30T10:00",
// "2026-11-30 10:00:00.25+01:00", "...Z". A timestamp without an offset is UTC. Throws
// UsageError naming `flag`.
TimeBound parse_time_bound(const std::string& flag, const std::string& text);

// The flags of `reconcile` (argv after the command word), after their environment variables.
// Throws UsageError.
ReconcileOptions parse_reconcile(const std::vector<std::string>& args, const Environment& env = {});

// Help text of `reconcile`.
std::string reconcile_usage();

}  // namespace outbox::app
