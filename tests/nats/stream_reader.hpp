// Reading a JetStream stream back as a consumer would, for the tests of the nats label (the
// publisher's and the relay's): libnats directly, a connection of its own, blocking. The server
// is scripts/nats-up.sh's (OUTBOX_NATS).
#pragma once

#include <nats/nats.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace outbox_test::nats {

using Clock = std::chrono::steady_clock;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

inline std::string nats_url() { return env("OUTBOX_NATS"); }

// A unique name per test run, so that streams kept in .local/nats from earlier runs never meet.
inline std::string unique(const std::string& base) {
  return base + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(Clock::now().time_since_epoch().count() % 1000000000);
}

// A stored message, as a consumer reads it.
struct Stored {
  std::uint64_t seq = 0;  // the stream sequence
  std::string subject;
  std::string data;
  std::map<std::string, std::string> headers;
};

// Reads a stream with libnats (a separate connection, blocking).
class StreamReader {
 public:
  // To a server of the test's own: its URL (user:password@ in it, if any) and TLS files.
  struct Access {
    std::string url;
    std::string tls_ca_file;
    std::string tls_cert_file;
    std::string tls_key_file;
  };
  // To scripts/nats-up.sh's server (OUTBOX_NATS).
  StreamReader() : StreamReader(Access{nats_url(), {}, {}, {}}) {}
  explicit StreamReader(const Access& access) {
    natsOptions* opts = nullptr;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK) s = natsOptions_SetURL(opts, access.url.c_str());
    if (s == NATS_OK && !access.tls_ca_file.empty()) {
      s = natsOptions_SetSecure(opts, true);
      if (s == NATS_OK) s = natsOptions_LoadCATrustedCertificates(opts, access.tls_ca_file.c_str());
    }
    if (s == NATS_OK && !access.tls_cert_file.empty()) {
      s = natsOptions_LoadCertificatesChain(opts, access.tls_cert_file.c_str(),
                                            access.tls_key_file.c_str());
    }
    if (s == NATS_OK) s = natsConnection_Connect(&nc_, opts);
    natsOptions_Destroy(opts);
    if (s != NATS_OK) throw std::runtime_error("connect: " + std::string(natsStatus_GetText(s)));
    s = natsConnection_JetStream(&js_, nc_, nullptr);
    if (s != NATS_OK) throw std::runtime_error("jetstream: " + std::string(natsStatus_GetText(s)));
  }
  ~StreamReader() {
    jsCtx_Destroy(js_);
    natsConnection_Destroy(nc_);
  }
  std::uint64_t count(const std::string& stream) {
    jsStreamInfo* si = nullptr;
    jsErrCode code{};
    natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &code);
    if (s != NATS_OK)
      throw std::runtime_error("stream info: " + std::string(natsStatus_GetText(s)));
    const std::uint64_t n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
  }
  std::vector<Stored> all(const std::string& stream) {
    std::vector<Stored> out;
    jsStreamInfo* si = nullptr;
    jsErrCode code{};
    if (js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &code) != NATS_OK) return out;
    const std::uint64_t first = si->State.FirstSeq;
    const std::uint64_t last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    for (std::uint64_t seq = first; seq != 0 && seq <= last; ++seq) {
      natsMsg* m = nullptr;
      if (js_GetMsg(&m, js_, stream.c_str(), seq, nullptr, &code) != NATS_OK) continue;
      Stored st;
      st.seq = seq;
      st.subject = natsMsg_GetSubject(m);
      st.data.assign(natsMsg_GetData(m), static_cast<std::size_t>(natsMsg_GetDataLength(m)));
      const char** keys = nullptr;
      int n = 0;
      if (natsMsgHeader_Keys(m, &keys, &n) == NATS_OK) {
        for (int i = 0; i < n; ++i) {
          const char* v = nullptr;
          if (natsMsgHeader_Get(m, keys[i], &v) == NATS_OK) st.headers[keys[i]] = v;
        }
        free(keys);
      }
      natsMsg_Destroy(m);
      out.push_back(std::move(st));
    }
    return out;
  }
  // A stream whose own limit on message size is `max_msg_size` bytes.
  void add_small_stream(const std::string& stream, const std::string& subject,
                        std::int32_t max_msg_size) {
    const char* subjects[] = {subject.c_str()};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = stream.c_str();
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_MemoryStorage;
    sc.MaxMsgSize = max_msg_size;
    jsStreamInfo* si = nullptr;
    jsErrCode code{};
    natsStatus s = js_AddStream(&si, js_, &sc, nullptr, &code);
    if (s != NATS_OK) throw std::runtime_error("add stream: " + std::string(natsStatus_GetText(s)));
    jsStreamInfo_Destroy(si);
  }
  // The stream's duplicate window and subjects.
  std::pair<std::chrono::nanoseconds, std::vector<std::string>> settings(
      const std::string& stream) {
    jsStreamInfo* si = nullptr;
    jsErrCode code{};
    natsStatus s = js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, &code);
    if (s != NATS_OK)
      throw std::runtime_error("stream info: " + std::string(natsStatus_GetText(s)));
    std::vector<std::string> subjects(si->Config->Subjects,
                                      si->Config->Subjects + si->Config->SubjectsLen);
    std::chrono::nanoseconds window(si->Config->Duplicates);
    jsStreamInfo_Destroy(si);
    return {window, subjects};
  }
  // Publishes `data` on `subject` with `headers`, waiting for the stream's acknowledgement.
  void publish(const std::string& subject, const std::string& data,
               const std::vector<std::pair<std::string, std::string>>& headers) {
    natsMsg* m = nullptr;
    natsStatus s =
        natsMsg_Create(&m, subject.c_str(), nullptr, data.data(), static_cast<int>(data.size()));
    for (const auto& [name, value] : headers) {
      if (s == NATS_OK) s = natsMsgHeader_Add(m, name.c_str(), value.c_str());
    }
    jsPubAck* ack = nullptr;
    jsErrCode code{};
    if (s == NATS_OK) s = js_PublishMsg(&ack, js_, m, nullptr, &code);
    jsPubAck_Destroy(ack);
    natsMsg_Destroy(m);
    if (s != NATS_OK) throw std::runtime_error("publish: " + std::string(natsStatus_GetText(s)));
  }
  void drop(const std::string& stream) {
    jsErrCode code{};
    js_DeleteStream(js_, stream.c_str(), nullptr, &code);
  }

 private:
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// Runs scripts/<name> (nats-up.sh, nats-down.sh) against the test's server (its ports from
// OUTBOX_NATS and OUTBOX_NATS_MONITOR); returns its exit status.
inline int run_nats_script(const std::string& name) {
  const std::string url = nats_url();
  const std::string port = url.substr(url.rfind(':') + 1);
  std::string cmd = "OUTBOX_NATS_PORT=" + port;
  const std::string mon = env("OUTBOX_NATS_MONITOR");
  if (!mon.empty()) cmd += " OUTBOX_NATS_MONITOR_PORT=" + mon.substr(mon.rfind(':') + 1);
  cmd += " " + std::string(OUTBOX_SOURCE_DIR) + "/scripts/" + name + " >/dev/null";
  return std::system(cmd.c_str());
}

}  // namespace outbox_test::nats
