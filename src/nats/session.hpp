// The module's blocking side and shared plumbing, private to src/nats: nats.c handle owners,
// the client options the publisher and the blocking sessions share (options.cpp), and a blocking
// connection with its JetStream context for setup, the tools, the tests and the progress bucket
// (session.cpp). Never on the relay's io thread: every call here may wait on the network.
#pragma once

#include <nats/nats.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "outbox/nats/publisher.hpp"

namespace spdlog {
class logger;
}

namespace outbox::nats::detail {

using Clock = std::chrono::steady_clock;

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const {
    if (p != nullptr) F(p);
  }
};
using MsgPtr = std::unique_ptr<natsMsg, Deleter<natsMsg, natsMsg_Destroy>>;
using OptionsPtr = std::unique_ptr<natsOptions, Deleter<natsOptions, natsOptions_Destroy>>;
using ConnectionPtr =
    std::unique_ptr<natsConnection, Deleter<natsConnection, natsConnection_Destroy>>;
using JsPtr = std::unique_ptr<jsCtx, Deleter<jsCtx, jsCtx_Destroy>>;
using StreamInfoPtr = std::unique_ptr<jsStreamInfo, Deleter<jsStreamInfo, jsStreamInfo_Destroy>>;

// The "nats" logger (a clone of the default one).
std::shared_ptr<spdlog::logger> logger();
std::string status_text(natsStatus s);
// The last error nats.c recorded on this thread, for a failed call's message.
std::string last_error(natsStatus s);
// Throws ConfigError "what: error" unless `s` is NATS_OK.
void check(natsStatus s, const std::string& what);

// The client options of `config` (URLs, credentials, NKey, TLS, -X options); throws ConfigError.
OptionsPtr make_options(const PublisherConfig& config);

// A blocking connection and its JetStream context. Destroyed in reverse order: the context
// holds the connection.
struct BlockingSession {
  OptionsPtr options;
  ConnectionPtr connection;
  JsPtr js;
};

// Connects within `timeout` (and waits that long for JetStream's answers); throws ConfigError
// naming what failed.
BlockingSession connect_blocking(const PublisherConfig& config, std::chrono::milliseconds timeout);

// The stream's information; null when it cannot be read, with the status and JetStream's code.
StreamInfoPtr stream_info(jsCtx* js, const std::string& name, natsStatus& s, jsErrCode& code);

// Creates the stream `name` capturing `subjects`, in files, with the duplicate window `dup_ns`.
natsStatus add_stream(jsCtx* js, const std::string& name, const std::vector<std::string>& subjects,
                      std::int64_t dup_ns, jsErrCode& code);

// Stream `name` as a blocking session finds it, created (add_stream()) when there was none.
struct FoundStream {
  BlockingSession session;
  bool missing = false;  // there was none: created now, unless `error`
  StreamInfoPtr info;    // when it existed
  std::string error;     // one line when it could be neither read nor created
  jsErrCode code{};      // JetStream's code for the failed call
};

// Throws ConfigError when it cannot connect (connect_blocking()).
FoundStream find_or_create_stream(const PublisherConfig& config, const std::string& name,
                                  const std::vector<std::string>& subjects, std::int64_t dup_ns,
                                  std::chrono::milliseconds timeout);

}  // namespace outbox::nats::detail
