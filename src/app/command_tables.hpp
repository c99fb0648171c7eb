// The flag tables of the commands: one row per flag (flags.hpp, of the kinds of flag_kinds.hpp),
// built over the options a command parses into. Rows several commands share (--pg, --slot,
// --publication, --help, the mapping rows of run and reconcile) are written once.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "flags.hpp"
#include "outbox/app/options.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::app::flags {

// The rows of the mapping flags, shared by run and reconcile so that both read the same record
// layout from the same flags (and OUTBOX_RELAY_* variables): --table (repeatable; `table_help`
// says what more tables mean to the command), --topic, the --column-* names, --require-json,
// --additional-placement, --column-timestamp, --tombstone-on-empty-payload, --format,
// --ce-source, --content-type, --column-traceparent, --column-tracestate.
Table mapping_flags(mapping::MapperConfig& config, std::string table_help);
Table run_flags(Options& options);
Table setup_flags(SetupOptions& options);
Table status_flags(StatusOptions& options);
Table drop_flags(DropOptions& options);
Table reconcile_table(ReconcileOptions& options);
Table prune_flags(PruneOptions& options);

// The rows of a command's table, built over throwaway options, handed to `visit` (for the
// reference pages, reference.cpp).
void visit_table(Command command, const std::function<void(const Table&)>& visit);

// The command words, in the order --help lists them, with their one-line summaries.
struct CommandWord {
  const char* word;
  Command command;
  const char* summary;
};
std::span<const CommandWord> command_words();

}  // namespace outbox::app::flags
