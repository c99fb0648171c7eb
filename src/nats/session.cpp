#include "session.hpp"

#include <nats/nats.h>
#include <spdlog/spdlog.h>

namespace outbox::nats::detail {

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    if (auto l = spdlog::get("nats")) return l;
    auto l = spdlog::default_logger()->clone("nats");
    spdlog::register_logger(l);
    return l;
  }();
  return log;
}

std::string status_text(natsStatus s) { return natsStatus_GetText(s); }

// The last error nats.c recorded on this thread, for a failed call's message.
std::string last_error(natsStatus s) {
  natsStatus ignored = NATS_OK;
  const char* text = nats_GetLastError(&ignored);
  std::string out = status_text(s);
  if (text != nullptr && *text != '\0' && out != text) out += std::string(": ") + text;
  return out;
}

void check(natsStatus s, const std::string& what) {
  if (s != NATS_OK) throw ConfigError(what + ": " + last_error(s));
}

// Connects within `timeout` (and waits that long for JetStream's answers); throws ConfigError
// naming what failed.
BlockingSession connect_blocking(const PublisherConfig& config, std::chrono::milliseconds timeout) {
  BlockingSession session;
  session.options = make_options(config);
  check(natsOptions_SetTimeout(session.options.get(), timeout.count()), "NATS options");
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, session.options.get());
  if (s != NATS_OK) throw ConfigError("NATS connect to " + config.urls + ": " + last_error(s));
  session.connection.reset(nc);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = timeout.count();
  jsCtx* js = nullptr;
  s = natsConnection_JetStream(&js, nc, &jo);
  if (s != NATS_OK) throw ConfigError("NATS JetStream context: " + last_error(s));
  session.js.reset(js);
  return session;
}

// The stream's information; null when it cannot be read, with the status and JetStream's code.
StreamInfoPtr stream_info(jsCtx* js, const std::string& name, natsStatus& s, jsErrCode& code) {
  code = static_cast<jsErrCode>(0);
  jsStreamInfo* si = nullptr;
  s = js_GetStreamInfo(&si, js, name.c_str(), nullptr, &code);
  return StreamInfoPtr(si);
}

// Creates the stream `name` capturing `subjects`, in files, with the duplicate window `dup_ns`.
natsStatus add_stream(jsCtx* js, const std::string& name, const std::vector<std::string>& subjects,
                      std::int64_t dup_ns, jsErrCode& code) {
  std::vector<const char*> subj;
  for (const auto& x : subjects) subj.push_back(x.c_str());
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = name.c_str();
  sc.Subjects = subj.data();
  sc.SubjectsLen = static_cast<int>(subj.size());
  sc.Storage = js_FileStorage;
  sc.Duplicates = dup_ns;
  jsStreamInfo* created = nullptr;
  const natsStatus s = js_AddStream(&created, js, &sc, nullptr, &code);
  StreamInfoPtr created_ptr(created);
  return s;
}

// Throws ConfigError when it cannot connect (connect_blocking()).
FoundStream find_or_create_stream(const PublisherConfig& config, const std::string& name,
                                  const std::vector<std::string>& subjects, std::int64_t dup_ns,
                                  std::chrono::milliseconds timeout) {
  FoundStream found;
  found.session = connect_blocking(config, timeout);
  jsCtx* js = found.session.js.get();
  natsStatus s = NATS_OK;
  found.info = stream_info(js, name, s, found.code);
  if (s == NATS_NOT_FOUND || found.code == JSStreamNotFoundErr) {
    found.missing = true;
    s = add_stream(js, name, subjects, dup_ns, found.code);
    if (s != NATS_OK) found.error = "cannot create JetStream stream " + name + ": " + last_error(s);
  } else if (s != NATS_OK) {
    found.error = "cannot read JetStream stream " + name + ": " + last_error(s);
  }
  return found;
}

}  // namespace outbox::nats::detail
