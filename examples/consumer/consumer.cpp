// examples/consumer: consume what outbox-relay publishes, with effects that happen exactly once.
//
// Kafka gives this consumer each event at least once. The relay re-sends what it had not yet
// confirmed when it crashed (same `id` header), and this process can crash after it applied a
// record but before Kafka stored its offset. Neither can be prevented; both are made harmless by
// the inbox pattern:
//
//   1. BEGIN
//   2. INSERT INTO processed_events (id, ...) VALUES (<id header>, ...) ON CONFLICT (id) DO NOTHING
//   3. if that inserted a row: apply the event (here: append it to applied_events)
//   4. COMMIT
//   5. commit the Kafka offsets
//
// The id and the effect are written in ONE PostgreSQL transaction: either both are there or
// neither is. A crash before 4 leaves nothing, and Kafka sends the record again; a crash between
// 4 and 5 leaves the id, so the record sent again is skipped at 2. The offset is committed only
// after 4, so it never passes a record whose effect is not durable (no loss). Two consumers racing
// on one event (a rebalance) serialise on the primary key: the second INSERT waits for the first
// transaction, then does nothing. Steps 2-3 run for each record of a batch (what poll has ready,
// up to 500 records), so that 1, 4 and 5 (a disk flush and two round trips) are paid per batch.
// Per-aggregate order holds: one partition per key, read and applied in offset order, and a
// re-sent event is skipped, never applied after a later one.
//
// Usage: outbox-example-consumer --brokers HOST:PORT --pg CONNINFO --topic NAME[,NAME...]
//                                --group ID        (--topic may be repeated)
// Creates its two tables if missing (in the connection's search_path). Any error ends it with exit
// code 1: PostgreSQL rolls back the open transaction and Kafka resends from the committed offset,
// so restarting is always safe. SIGTERM/SIGINT: finish the batch at hand, leave the group, exit 0.
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// The inbox: one row per event id ever applied. Keep its rows at least as long as Kafka may
// deliver the event again (the topic's retention), then prune by processed_at.
constexpr const char* kCreateProcessedEvents =
    "CREATE TABLE IF NOT EXISTS processed_events ("
    " id uuid PRIMARY KEY, topic text NOT NULL, kafka_partition int NOT NULL,"
    " kafka_offset bigint NOT NULL, processed_at timestamptz NOT NULL DEFAULT now())";
// Stands in for the business change. An append: an event applied twice would be two rows.
constexpr const char* kCreateAppliedEvents =
    "CREATE TABLE IF NOT EXISTS applied_events ("
    " position bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text, payload text)";

// One RAII holder per C handle type (docs/STYLE.md, 3).
template <typename T, void (*Free)(T*)>
struct FreeWith {
  void operator()(T* p) const noexcept { Free(p); }
};
using PgConn = std::unique_ptr<PGconn, FreeWith<PGconn, PQfinish>>;
using PgResult = std::unique_ptr<PGresult, FreeWith<PGresult, PQclear>>;
using KafkaConf =
    std::unique_ptr<rd_kafka_conf_t, FreeWith<rd_kafka_conf_t, rd_kafka_conf_destroy>>;
using Consumer = std::unique_ptr<rd_kafka_t, FreeWith<rd_kafka_t, rd_kafka_destroy>>;
using Message =
    std::unique_ptr<rd_kafka_message_t, FreeWith<rd_kafka_message_t, rd_kafka_message_destroy>>;
using TopicList = std::unique_ptr<
    rd_kafka_topic_partition_list_t,
    FreeWith<rd_kafka_topic_partition_list_t, rd_kafka_topic_partition_list_destroy>>;

constexpr std::size_t kMaxBatch = 500;

volatile std::sig_atomic_t stop_requested = 0;
extern "C" void request_stop(int) { stop_requested = 1; }

struct Options {
  std::string brokers, pg, group;
  std::vector<std::string> topics;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "outbox-example-consumer: %s\nusage: outbox-example-consumer --brokers HOST:PORT "
               "--pg CONNINFO --topic NAME[,NAME...] --group ID\n",
               what.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag != "--brokers" && flag != "--pg" && flag != "--topic" && flag != "--group") {
      usage_error("unknown flag " + flag);
    }
    if (i + 1 == argc || argv[i + 1][0] == '\0') usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--brokers") options.brokers = value;
    if (flag == "--pg") options.pg = value;
    if (flag == "--group") options.group = value;
    if (flag == "--topic") {
      for (std::size_t start = 0, comma = 0; comma != std::string::npos; start = comma + 1) {
        comma = value.find(',', start);
        options.topics.push_back(value.substr(start, comma - start));
        if (options.topics.back().empty()) usage_error("--topic " + value + ": empty topic name");
      }
    }
  }
  if (options.brokers.empty()) usage_error("missing --brokers");
  if (options.pg.empty()) usage_error("missing --pg");
  if (options.topics.empty()) usage_error("missing --topic");
  if (options.group.empty()) usage_error("missing --group");
  return options;
}

// One statement with text parameters; throws with the server's message.
PgResult exec(PGconn* pg, const char* sql, const std::vector<const char*>& params = {}) {
  PgResult result(PQexecParams(pg, sql, static_cast<int>(params.size()), nullptr, params.data(),
                               nullptr, nullptr, 0));
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    throw std::runtime_error(std::string("PostgreSQL: ") + PQerrorMessage(pg) + " in: " + sql);
  }
  return result;
}

std::string where(const rd_kafka_message_t& m) {
  return std::string(rd_kafka_topic_name(m.rkt)) + "/" + std::to_string(m.partition) + "@" +
         std::to_string(m.offset);
}

// Steps 2-3 for one record, in the batch's transaction. Returns false when its id was already
// processed (a duplicate).
bool apply_once(PGconn* pg, const rd_kafka_message_t& m) {
  rd_kafka_headers_t* headers = nullptr;
  const void* id = nullptr;
  std::size_t id_size = 0;
  if (rd_kafka_message_headers(&m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      rd_kafka_header_get_last(headers, "id", &id, &id_size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      id == nullptr) {
    // Without an id there is nothing to deduplicate on: stop rather than guess.
    throw std::runtime_error("record " + where(m) + " has no id header");
  }
  const std::string event_id(static_cast<const char*>(id), id_size);
  const std::string topic = rd_kafka_topic_name(m.rkt);
  const std::string partition = std::to_string(m.partition);
  const std::string offset = std::to_string(m.offset);

  const PgResult inbox = exec(pg,
                              "INSERT INTO processed_events (id, topic, kafka_partition,"
                              " kafka_offset) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                              {event_id.c_str(), topic.c_str(), partition.c_str(), offset.c_str()});
  const bool first_time = std::strcmp(PQcmdTuples(inbox.get()), "1") == 0;
  if (first_time) {
    // The event itself: key = aggregate id, value = payload as PostgreSQL printed it.
    const std::string key(static_cast<const char*>(m.key), m.key ? m.key_len : 0);
    const std::string payload(static_cast<const char*>(m.payload), m.payload ? m.len : 0);
    exec(pg, "INSERT INTO applied_events (event_id, aggregate_id, payload) VALUES ($1, $2, $3)",
         {event_id.c_str(), m.key ? key.c_str() : nullptr, payload.c_str()});
  }
  return first_time;
}

Consumer subscribe(const Options& options) {
  KafkaConf conf(rd_kafka_conf_new());
  char error[512];
  const std::pair<const char*, std::string> settings[] = {
      {"bootstrap.servers", options.brokers},
      {"group.id", options.group},            // the group's members share the partitions
      {"enable.auto.commit", "false"},        // offsets only after the PostgreSQL commit (5)
      {"isolation.level", "read_committed"},  // never see aborted transactional records
      {"auto.offset.reset", "earliest"},      // a new group starts at the beginning
      {"session.timeout.ms", "10000"},        // a crashed member's partitions move on after 10 s
  };
  for (const auto& [name, value] : settings) {
    if (rd_kafka_conf_set(conf.get(), name, value.c_str(), error, sizeof error) !=
        RD_KAFKA_CONF_OK) {
      throw std::runtime_error(std::string("Kafka setting ") + name + ": " + error);
    }
  }
  Consumer consumer(rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), error, sizeof error));
  if (!consumer) throw std::runtime_error(std::string("Kafka consumer: ") + error);
  conf.release();  // rd_kafka_new took it
  rd_kafka_poll_set_consumer(consumer.get());
  TopicList topics(rd_kafka_topic_partition_list_new(static_cast<int>(options.topics.size())));
  for (const auto& topic : options.topics) {
    rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
  }
  if (const auto err = rd_kafka_subscribe(consumer.get(), topics.get())) {
    throw std::runtime_error(std::string("Kafka subscribe: ") + rd_kafka_err2str(err));
  }
  return consumer;
}

// Step 5: per partition, the offset after the batch's last record (Kafka's "next to read"). A
// commit that fails (a rebalance moved the partition) is harmless: those records come again and
// are skipped at step 2.
void commit_offsets(rd_kafka_t* consumer, const std::vector<Message>& batch) {
  TopicList offsets(rd_kafka_topic_partition_list_new(static_cast<int>(batch.size())));
  for (const Message& m : batch) {
    const char* topic = rd_kafka_topic_name(m->rkt);
    rd_kafka_topic_partition_t* p =
        rd_kafka_topic_partition_list_find(offsets.get(), topic, m->partition);
    if (p == nullptr) p = rd_kafka_topic_partition_list_add(offsets.get(), topic, m->partition);
    p->offset = m->offset + 1;  // a partition's records come in offset order: the last one wins
  }
  if (const auto err = rd_kafka_commit(consumer, offsets.get(), 0 /* synchronous */)) {
    std::fprintf(stderr, "event=offset_commit_failed error=\"%s\"\n", rd_kafka_err2str(err));
  }
}

int run(const Options& options) {
  PgConn pg(PQconnectdb(options.pg.c_str()));
  if (PQstatus(pg.get()) != CONNECTION_OK) {
    throw std::runtime_error(std::string("PostgreSQL: ") + PQerrorMessage(pg.get()));
  }
  exec(pg.get(), kCreateProcessedEvents);
  exec(pg.get(), kCreateAppliedEvents);
  Consumer consumer = subscribe(options);
  std::fprintf(stderr, "event=started group=%s\n", options.group.c_str());

  long long applied = 0, skipped = 0;
  std::vector<Message> batch;
  while (stop_requested == 0) {
    // Wait up to 500 ms for a record, then take what is already fetched.
    batch.clear();
    for (int wait_ms = 500; batch.size() < kMaxBatch; wait_ms = 0) {
      Message m(rd_kafka_consumer_poll(consumer.get(), wait_ms));
      if (!m) break;
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        // librdkafka retries transport and coordinator errors by itself; a fatal one ends us.
        if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
          throw std::runtime_error(rd_kafka_message_errstr(m.get()));
        }
        std::fprintf(stderr, "event=kafka_error error=\"%s\"\n", rd_kafka_message_errstr(m.get()));
        continue;
      }
      batch.push_back(std::move(m));
    }
    if (batch.empty()) continue;
    exec(pg.get(), "BEGIN");  // 1
    for (const Message& m : batch) {
      if (apply_once(pg.get(), *m)) {  // 2, 3
        ++applied;
      } else {
        ++skipped;
        std::fprintf(stderr, "event=duplicate_skipped at=%s\n", where(*m).c_str());
      }
    }
    exec(pg.get(), "COMMIT");               // 4
    commit_offsets(consumer.get(), batch);  // 5
  }
  // SIGTERM/SIGINT: every batch is applied and its offsets committed; leave the group now so that
  // its partitions move on at once.
  rd_kafka_consumer_close(consumer.get());
  std::fprintf(stderr, "event=stopped applied=%lld skipped=%lld\n", applied, skipped);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "outbox-example-consumer: error: %s\n", e.what());
    return 1;
  }
}
