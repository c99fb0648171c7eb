// The cross-flag checks: the combinations of flags that make no sense, checked once a command's
// table has been applied (and skipped with --help or --version). Each throws UsageError naming
// the flag.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "outbox/app/options.hpp"
#include "outbox/app/reconcile_options.hpp"
#include "outbox/mapping/mapper.hpp"

namespace outbox::app::flags {

// Properties that make librdkafka run a command or load code (plugin.library.paths,
// sasl.kerberos.kinit.cmd, ssl.engine.location, ssl.providers; a sasl.kerberos.principal or
// keytab with shell metacharacters, which the default kinit command passes to /bin/sh): refused
// (UsageError naming the property, never the value) unless `allowed`. `source` names the flags
// ("-X, --kafka-config").
void check_kafka_properties(const std::vector<std::pair<std::string, std::string>>& properties,
                            bool allowed, const std::string& source);
// The combinations of those flags that make no sense (--ce-source or --content-type without
// --format cloudevents, --column-tracestate without --column-traceparent). Throws UsageError.
void check_mapping(const mapping::MapperConfig& config);

// run: one sink, Kafka (--brokers) or NATS JetStream (--nats), and no flag of the other;
// --transactional-id only with --delivery exactly-once; the mapping flags (check_mapping);
// --messages not with --format cloudevents.
void check_run(const Options& options);
// run with --messages: the mapping as the relay will build it (an empty table: messages only),
// e.g. a --topic naming a column messages do not have.
void check_messages_mapping(const mapping::MapperConfig& config);
// setup: --message-writer only with --messages.
void check_setup(const SetupOptions& options);
// reconcile: the mapping flags, the librdkafka properties (--kafka-config's and -X's, merged), and
// --until after --since when both are ages or both timestamps
// (mixed ones are checked when run).
void check_reconcile(const ReconcileOptions& options);
// prune and status: at most one progress record, safe Kafka properties.
void check_progress_record(const ProgressRecordFlags& options);
// prune: one progress record (--brokers or --nats) unless --without-progress-record.
void check_prune(const PruneOptions& options);

}  // namespace outbox::app::flags
