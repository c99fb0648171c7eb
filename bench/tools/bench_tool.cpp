// Helpers for bench/run.sh (not part of the relay). Subcommands:
//
//   wait-count --brokers B --topic T --count N [--timeout-s S] [--poll-ms MS] [--committed 1]
//       Polls the topic's high watermarks (summed over partitions) until they reach N.
//       Prints "<first_ns> <last_ns>": CLOCK_REALTIME when the first record was seen and when
//       the count was reached. Exit 1 on timeout.
//   load-paced --pg CONNINFO --table T --rate R --seconds S [--payload-bytes B] [--conns C]
//       Inserts one-event transactions at a fixed total rate from C connections (default 4),
//       synchronous_commit as configured (on). Prints "<inserted> <achieved_rate>".
//   create-topics --brokers B --topics T1,T2,... [--partitions P]
//       Creates the topics (P partitions, default 3, replication 1); existing ones are fine.
//   latency --brokers B --topic T --count N [--timeout-s S] [--dump FILE]
//       Consumes the topic from the beginning (read_committed); for each record, latency = receive
//       time minus the record timestamp (the relay stamps records with the transaction's commit
//       time).
//       Prints "<count> <p50_ms> <p99_ms> <max_ms>"; --dump writes "<commit_ms> <latency_ms>"
//       per record, in the order received, to see when the slow ones were committed.
//   produce-latency --brokers B --topic T --rate R --seconds S [--delay-ms D]
//                   [--metadata-request 0|1] [--X PROPERTY=VALUE]
//       Kafka alone: produces 200-byte records with the relay's producer settings (idempotent,
//       acks=all, linger.ms=5, lz4, headers id and type) at a fixed rate, starting D ms (500)
//       after creating the producer, and prints "<count> <p50_ms> <p99_ms> <max_ms>" of
//       produce-to-delivery-report latency (stderr: the same without the first 2 s).
//       --metadata-request 0 leaves out the relay's immediate metadata request for the topic.
//   drain --pg CONNINFO --slot S --publication P --end-lsn X/Y [--pause-us U] [--timeout-s S]
//       The fastest streaming client we know, as the walsender's ceiling: START_REPLICATION on
//       the slot, reads every message and discards it, until a Commit ends at or after the end
//       LSN. It reads like the relay (pauses of up to U microseconds, default 500, while the
//       stream is busy; 0 waits for readability) and sends no feedback. Prints the message
//       count and the seconds it took.
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "outbox/relay/read_pacer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "bench_tool: %s\n", m.c_str());
  std::exit(1);
}

std::map<std::string, std::string> parse_flags(int argc, char** argv, int from) {
  std::map<std::string, std::string> f;
  for (int i = from; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) die("bad argument " + k);
    f[k.substr(2)] = argv[++i];
  }
  return f;
}

std::string need(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  if (it == f.end()) die("--" + k + " is required");
  return it->second;
}

std::string opt(const std::map<std::string, std::string>& f, const std::string& k,
                const std::string& d) {
  auto it = f.find(k);
  return it == f.end() ? d : it->second;
}

rd_kafka_t* new_client(rd_kafka_type_t type, const std::string& brokers,
                       const std::vector<std::pair<std::string, std::string>>& extra) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  auto set = [&](const std::string& k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      die(k + ": " + err);
    }
  };
  set("bootstrap.servers", brokers);
  set("log_level", "3");
  for (const auto& [k, v] : extra) set(k, v);
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof err);
  if (rk == nullptr) die(std::string("rd_kafka_new: ") + err);
  return rk;
}

// Partition count of the topic, 0 when it does not exist (yet).
int partitions(rd_kafka_t* rk, const std::string& topic) {
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  int n = 0;
  if (rd_kafka_metadata(rk, 0, t, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
      md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    n = md->topics[0].partition_cnt;
  }
  if (md != nullptr) rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(t);
  return n;
}

// wait-count --committed: reads the records (read_committed) instead of summing high watermarks,
// which in a topic written in transactions also count the commit markers and what is not
// committed yet.
int wait_count_committed(const std::map<std::string, std::string>& f) {
  const std::string topic = need(f, "topic");
  const long long count = std::stoll(need(f, "count"));
  const auto deadline = Clock::now() + std::chrono::seconds(std::stoi(opt(f, "timeout-s", "600")));
  rd_kafka_t* rk = new_client(RD_KAFKA_CONSUMER, need(f, "brokers"),
                              {{"allow.auto.create.topics", "false"},
                               {"group.id", "bench-wait"},
                               {"isolation.level", "read_committed"},
                               {"enable.auto.commit", "false"}});
  rd_kafka_poll_set_consumer(rk);
  int nparts = 0;
  while (nparts == 0 && Clock::now() < deadline) {
    nparts = partitions(rk, topic);
    if (nparts == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(nparts);
  for (int p = 0; p < nparts; ++p) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  std::int64_t first_ns = 0;
  long long total = 0;
  while (Clock::now() < deadline && total < count) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (first_ns == 0) first_ns = realtime_ns();
      ++total;
    }
    rd_kafka_message_destroy(m);
  }
  const std::int64_t last_ns = realtime_ns();
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  if (total < count) {
    std::fprintf(stderr, "bench_tool: timed out: topic %s holds %lld of %lld committed records\n",
                 topic.c_str(), total, count);
    return 1;
  }
  std::printf("%lld %lld\n", static_cast<long long>(first_ns), static_cast<long long>(last_ns));
  return 0;
}

int wait_count(const std::map<std::string, std::string>& f) {
  if (f.count("committed") != 0) return wait_count_committed(f);
  const std::string topic = need(f, "topic");
  const long long count = std::stoll(need(f, "count"));
  const auto deadline = Clock::now() + std::chrono::seconds(std::stoi(opt(f, "timeout-s", "600")));
  const auto poll = std::chrono::milliseconds(std::stoi(opt(f, "poll-ms", "10")));
  // A consumer handle with auto-creation off: polling must not create the topic itself.
  rd_kafka_t* rk = new_client(RD_KAFKA_CONSUMER, need(f, "brokers"),
                              {{"allow.auto.create.topics", "false"}, {"group.id", "bench-wait"}});
  int nparts = 0;
  std::int64_t first_ns = 0;
  long long total = 0;
  while (Clock::now() < deadline) {
    if (nparts == 0) nparts = partitions(rk, topic);
    total = 0;
    for (int p = 0; p < nparts; ++p) {
      std::int64_t lo = 0, hi = 0;
      if (rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &lo, &hi, 2000) ==
          RD_KAFKA_RESP_ERR_NO_ERROR) {
        total += hi;
      }
    }
    if (total > 0 && first_ns == 0) first_ns = realtime_ns();
    if (total >= count) {
      std::printf("%lld %lld\n", static_cast<long long>(first_ns),
                  static_cast<long long>(realtime_ns()));
      rd_kafka_destroy(rk);
      return total == count ? 0 : 3;
    }
    std::this_thread::sleep_for(poll);
  }
  std::fprintf(stderr, "bench_tool: timed out: topic %s holds %lld of %lld records\n",
               topic.c_str(), total, count);
  rd_kafka_destroy(rk);
  return 1;
}

int load_paced(const std::map<std::string, std::string>& f) {
  const std::string conninfo = need(f, "pg");
  const std::string table = need(f, "table");
  const double rate = std::stod(need(f, "rate"));
  const double seconds = std::stod(need(f, "seconds"));
  const int conns = std::stoi(opt(f, "conns", "4"));
  const int payload_bytes = std::stoi(opt(f, "payload-bytes", "200"));
  const long long total = static_cast<long long>(rate * seconds);
  // jsonb prints as {"data": "<hex>"}: 12 bytes around the string.
  std::string hex;
  for (int i = 0; hex.size() < static_cast<std::size_t>(std::max(0, payload_bytes - 12)); ++i) {
    hex += "0123456789abcdef"[(i * 7 + 3) % 16];
  }
  const std::string sql = "INSERT INTO " + table +
                          " (aggregatetype, aggregateid, type, payload) VALUES ('order', $1, "
                          "'OrderCreated', jsonb_build_object('data', $2::text))";
  std::atomic<long long> inserted{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now() + std::chrono::milliseconds(200);
  std::vector<std::thread> threads;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&, c] {
      PGconn* pg = PQconnectdb(conninfo.c_str());
      if (PQstatus(pg) != CONNECTION_OK) {
        std::fprintf(stderr, "bench_tool: %s", PQerrorMessage(pg));
        failed = true;
        PQfinish(pg);
        return;
      }
      PGresult* prep = PQprepare(pg, "ins", sql.c_str(), 2, nullptr);
      if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
        std::fprintf(stderr, "bench_tool: %s", PQerrorMessage(pg));
        failed = true;
      }
      PQclear(prep);
      // Event k (global numbering) is due at start + k / rate; this thread takes k = c mod conns.
      for (long long k = c; k < total && !failed; k += conns) {
        auto due = start + std::chrono::nanoseconds(static_cast<long long>(k * 1e9 / rate));
        std::this_thread::sleep_until(due);
        std::string key = "agg-" + std::to_string(k % 1000);
        const char* params[2] = {key.c_str(), hex.c_str()};
        PGresult* r = PQexecPrepared(pg, "ins", 2, params, nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
          std::fprintf(stderr, "bench_tool: insert: %s", PQerrorMessage(pg));
          failed = true;
        }
        PQclear(r);
        ++inserted;
      }
      PQfinish(pg);
    });
  }
  for (auto& t : threads) t.join();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%lld %.1f\n", inserted.load(), static_cast<double>(inserted.load()) / took);
  return failed ? 1 : 0;
}

int latency(const std::map<std::string, std::string>& f) {
  const std::string topic = need(f, "topic");
  const long long count = std::stoll(need(f, "count"));
  const auto deadline = Clock::now() + std::chrono::seconds(std::stoi(opt(f, "timeout-s", "600")));
  rd_kafka_t* rk = new_client(
      RD_KAFKA_CONSUMER, need(f, "brokers"),
      {{"group.id", "bench-latency"},
       {"enable.auto.commit", "false"},
       {"isolation.level", "read_committed"},  // exactly-once: commit to visible
       {"fetch.wait.max.ms", "500"},  // fetch.min.bytes=1: returns as soon as data is there
       {"fetch.error.backoff.ms", "5"},
       {"allow.auto.create.topics", "true"}});
  int nparts = 0;
  while (nparts == 0 && Clock::now() < deadline) {
    nparts = partitions(rk, topic);
    if (nparts == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (nparts == 0) die("topic " + topic + " did not appear");
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(nparts);
  for (int p = 0; p < nparts; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(rk, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(count));
  std::vector<std::int64_t> commit_ms;
  const std::string dump = opt(f, "dump", "");
  if (!dump.empty()) commit_ms.reserve(static_cast<std::size_t>(count));
  while (static_cast<long long>(lat.size()) < count && Clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const std::int64_t now_ms = realtime_ns() / 1'000'000;
      rd_kafka_timestamp_type_t tt;
      const std::int64_t ts = rd_kafka_message_timestamp(m, &tt);
      lat.push_back(static_cast<double>(now_ms - ts));
      if (!dump.empty()) commit_ms.push_back(ts);
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  if (lat.empty()) die("no records consumed");
  if (!dump.empty()) {
    std::FILE* out = std::fopen(dump.c_str(), "w");
    if (out == nullptr) die("cannot write " + dump);
    for (std::size_t i = 0; i < lat.size(); ++i) {
      std::fprintf(out, "%lld %.0f\n", static_cast<long long>(commit_ms[i]), lat[i]);
    }
    std::fclose(out);
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) {
    return lat[std::min(lat.size() - 1,
                        static_cast<std::size_t>(q * static_cast<double>(lat.size())))];
  };
  std::printf("%zu %.1f %.1f %.1f\n", lat.size(), pct(0.50), pct(0.99), lat.back());
  return static_cast<long long>(lat.size()) == count ? 0 : 1;
}

int create_topics(const std::map<std::string, std::string>& f) {
  const int nparts = std::stoi(opt(f, "partitions", "3"));
  std::vector<std::string> names;
  const std::string list = need(f, "topics");
  for (std::size_t pos = 0; pos <= list.size();) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (comma > pos) names.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  rd_kafka_t* rk = new_client(RD_KAFKA_PRODUCER, need(f, "brokers"), {});
  std::vector<rd_kafka_NewTopic_t*> topics;
  char err[512];
  for (const auto& n : names) {
    rd_kafka_NewTopic_t* t = rd_kafka_NewTopic_new(n.c_str(), nparts, 1, err, sizeof err);
    if (t == nullptr) die(err);
    topics.push_back(t);
  }
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, topics.data(), topics.size(), nullptr, q);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  int rc = 0;
  if (ev == nullptr) die("CreateTopics timed out");
  const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(ev);
  size_t n = 0;
  const rd_kafka_topic_result_t** tr = rd_kafka_CreateTopics_result_topics(res, &n);
  for (size_t i = 0; i < n; ++i) {
    auto e = rd_kafka_topic_result_error(tr[i]);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      std::fprintf(stderr, "bench_tool: create %s: %s\n", rd_kafka_topic_result_name(tr[i]),
                   rd_kafka_topic_result_error_string(tr[i]));
      rc = 1;
    }
  }
  rd_kafka_event_destroy(ev);
  for (auto* t : topics) rd_kafka_NewTopic_destroy(t);
  rd_kafka_queue_destroy(q);
  rd_kafka_destroy(rk);
  return rc;
}

std::uint64_t parse_lsn(const std::string& text) {
  unsigned hi = 0;
  unsigned lo = 0;
  if (std::sscanf(text.c_str(), "%X/%X", &hi, &lo) != 2) die("bad LSN " + text);
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

std::uint64_t be64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

int produce_latency(const std::map<std::string, std::string>& f) {
  const std::string topic = need(f, "topic");
  const double rate = std::stod(need(f, "rate"));
  const double seconds = std::stod(need(f, "seconds"));
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"bootstrap.servers", need(f, "brokers")},
                                                        {"enable.idempotence", "true"},
                                                        {"acks", "all"},
                                                        {"linger.ms", "5"},
                                                        {"compression.codec", "lz4"},
                                                        {"log_level", "3"}}) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      die(k + ": " + err);
    }
  }
  if (auto x = opt(f, "X", ""); !x.empty()) {
    auto eq = x.find('=');
    if (rd_kafka_conf_set(conf, x.substr(0, eq).c_str(), x.substr(eq + 1).c_str(), err,
                          sizeof err) != RD_KAFKA_CONF_OK)
      die(err);
  }
  static std::vector<double> latencies;
  static long long failures = 0;
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
    if (m->err) {
      ++failures;
      return;
    }
    auto sent = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(m->_private));
    auto now =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
            .count();
    latencies.push_back(static_cast<double>(now - sent) / 1000.0);
  });
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == nullptr) die(std::string("rd_kafka_new: ") + err);
  const std::string value = "{\"data\": \"" + std::string(188, 'a') + "\"}";
  const long long total = static_cast<long long>(rate * seconds);
  rd_kafka_topic_t* warm_t = nullptr;
  const auto start = Clock::now() + std::chrono::milliseconds(std::stoi(opt(f, "delay-ms", "500")));
  for (long long k = 0; k < total; ++k) {
    auto due = start + std::chrono::nanoseconds(static_cast<long long>(k * 1e9 / rate));
    while (Clock::now() < due) {
      rd_kafka_poll(rk, 0);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (k == 0 && opt(f, "metadata-request", "1") == "1") {
      // What the relay does for a new topic (src/kafka/producer.cpp, request_metadata()).
      warm_t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
      const rd_kafka_metadata_t* md = nullptr;
      if (rd_kafka_metadata(rk, 0, warm_t, &md, 0) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
      }
    }
    std::string key = "agg-" + std::to_string(k % 1000);
    std::string id = std::to_string(k);
    auto sent =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
            .count();
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_HEADER("id", id.data(), static_cast<ssize_t>(id.size())),
        RD_KAFKA_V_HEADER("type", "OrderCreated", 12),
        RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<std::intptr_t>(sent))),
        RD_KAFKA_V_END);
    if (e) die(std::string("produce: ") + rd_kafka_err2str(e));
  }
  rd_kafka_flush(rk, 60'000);
  if (warm_t) rd_kafka_topic_destroy(warm_t);
  rd_kafka_destroy(rk);
  if (latencies.empty()) die("no deliveries");
  if (latencies.size() > 2 * static_cast<std::size_t>(rate)) {
    // Delivery order is about production order: without the first 2 s (start-up).
    std::vector<double> rest(latencies.begin() + 2 * static_cast<std::size_t>(rate),
                             latencies.end());
    std::sort(rest.begin(), rest.end());
    std::fprintf(stderr, "after the first 2 s: p50 %.1f p99 %.1f max %.1f\n", rest[rest.size() / 2],
                 rest[static_cast<std::size_t>(0.99 * (rest.size() - 1))], rest.back());
  }
  std::sort(latencies.begin(), latencies.end());
  auto q = [](double p) { return latencies[static_cast<std::size_t>(p * (latencies.size() - 1))]; };
  std::printf("%zu %.1f %.1f %.1f\n", latencies.size(), q(0.5), q(0.99), latencies.back());
  return failures == 0 ? 0 : 1;
}

int drain(const std::map<std::string, std::string>& f) {
  const std::uint64_t end = parse_lsn(need(f, "end-lsn"));
  const auto max_pause = std::chrono::microseconds(std::stoi(opt(f, "pause-us", "500")));
  const auto deadline = Clock::now() + std::chrono::seconds(std::stoi(opt(f, "timeout-s", "600")));
  PGconn* pg = PQconnectdb((need(f, "pg") + " replication=database").c_str());
  if (PQstatus(pg) != CONNECTION_OK) die(PQerrorMessage(pg));
  const std::string cmd = "START_REPLICATION SLOT " + need(f, "slot") +
                          " LOGICAL 0/0 (proto_version '1', publication_names '" +
                          need(f, "publication") + "')";
  PGresult* r = PQexec(pg, cmd.c_str());
  if (PQresultStatus(r) != PGRES_COPY_BOTH) die(PQerrorMessage(pg));
  PQclear(r);
  const int fd = PQsocket(pg);
  // What the kernel holds for us, and the receive buffer's size (pg::ReplicationConnection's
  // backlog(), without linking the relay's pg module).
  auto backlog = [fd] {
    int queued = 0;
    int rcvbuf = 0;
    socklen_t len = sizeof rcvbuf;
    ioctl(fd, FIONREAD, &queued);
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len);
    return std::pair<std::size_t, std::size_t>(std::max(queued, 0), std::max(rcvbuf, 0));
  };
  const auto t0 = Clock::now();
  outbox::relay::ReadPacer pacer(max_pause);
  long long messages = 0;
  for (bool done = false; !done;) {
    char* buf = nullptr;
    int n = PQgetCopyData(pg, &buf, 1);
    if (n > 0) {
      ++messages;
      pacer.on_frame(static_cast<std::size_t>(n));
      // XLogData: 'w', start, end, time (25 bytes), then the pgoutput message; Commit: 'C',
      // flags, commit LSN, end LSN.
      if (n >= 43 && buf[0] == 'w' && buf[25] == 'C' && be64(buf + 35) >= end) done = true;
      PQfreemem(buf);
      continue;
    }
    if (n < 0) die(std::string("stream ended: ") + PQerrorMessage(pg));
    if (Clock::now() > deadline) die("timed out before the end LSN");
    if (pacer.busy(Clock::now())) {
      // The relay's paced reading (outbox/relay/read_pacer.hpp), with a sleep for its timer.
      auto read_now = [&] {
        const auto [queued, capacity] = backlog();
        return pacer.read_now(queued, capacity);
      };
      if (!read_now()) {
        std::this_thread::sleep_for(pacer.pause());
        read_now();
      }
    } else {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, 1000);
    }
    if (!PQconsumeInput(pg)) die(PQerrorMessage(pg));
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%lld %.4f\n", messages, took);
  PQfinish(pg);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    die("usage: bench_tool wait-count|load-paced|latency|create-topics|drain|produce-latency "
        "--flag value ...");
  const std::string cmd = argv[1];
  const auto f = parse_flags(argc, argv, 2);
  if (cmd == "wait-count") return wait_count(f);
  if (cmd == "load-paced") return load_paced(f);
  if (cmd == "latency") return latency(f);
  if (cmd == "create-topics") return create_topics(f);
  if (cmd == "drain") return drain(f);
  if (cmd == "produce-latency") return produce_latency(f);
  die("unknown subcommand " + cmd);
}
