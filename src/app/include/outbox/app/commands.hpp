// The operating commands beside `run` that set the outbox up and take it down: setup, drop (status,
// prune and reconcile are the life cycle's: outbox/lifecycle/). One-shot and blocking (they use
// pg::AdminSession); they print their report on `out` and errors on `err`, naming the object and
// the server's message, and return the process exit code.
#pragma once

#include <iosfwd>

#include "outbox/app/options.hpp"

namespace outbox::app {

int run_setup(const SetupOptions& options, std::ostream& out, std::ostream& err);
int run_drop(const DropOptions& options, std::ostream& out, std::ostream& err);

}  // namespace outbox::app
