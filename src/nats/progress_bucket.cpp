#include "outbox/nats/progress_bucket.hpp"

#include <nats/nats.h>

#include "errors.hpp"
#include "session.hpp"

namespace outbox::nats {

using namespace detail;

namespace {
using KvPtr = std::unique_ptr<kvStore, Deleter<kvStore, kvStore_Destroy>>;
using EntryPtr = std::unique_ptr<kvEntry, Deleter<kvEntry, kvEntry_Destroy>>;

bool refused(natsStatus s) {
  return s == NATS_NOT_PERMITTED || classify_status(s).kind == sink::ErrorKind::kAuthorization;
}
}  // namespace

struct ProgressBucket::Impl {
  PublisherConfig config;
  std::string bucket;
  std::chrono::milliseconds timeout;
  BlockingSession session;  // the kv store below holds its context: declared first
  KvPtr kv;

  Result fail(natsStatus s, const std::string& what) {
    Result r;
    r.error = what + " JetStream key-value bucket " + bucket + ": " + last_error(s);
    r.refused = refused(s);
    // Anew next time: the connection may be the cause.
    kv.reset();
    session = BlockingSession{};
    return r;
  }
};

ProgressBucket::ProgressBucket(PublisherConfig config, std::string bucket,
                               std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->bucket = std::move(bucket);
  impl_->timeout = timeout;
}

ProgressBucket::~ProgressBucket() {
  impl_->kv.reset();  // before the session it uses
}

ProgressBucket::Result ProgressBucket::open() {
  Impl& im = *impl_;
  if (im.kv) return {};
  try {
    im.session = connect_blocking(im.config, im.timeout);
  } catch (const ConfigError& e) {
    Result r;
    r.error = e.what();
    r.refused = r.error.find("Authorization") != std::string::npos ||
                r.error.find("ermission") != std::string::npos;
    return r;
  }
  kvStore* kv = nullptr;
  natsStatus s = js_KeyValue(&kv, im.session.js.get(), im.bucket.c_str());
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = im.bucket.c_str();
    cfg.Description = "outbox-relay progress records";
    cfg.History = 1;
    cfg.StorageType = js_FileStorage;
    s = js_CreateKeyValue(&kv, im.session.js.get(), &cfg);
  }
  if (s != NATS_OK) return im.fail(s, "cannot open");
  im.kv.reset(kv);
  return {};
}

ProgressBucket::Result ProgressBucket::get(const std::string& key) {
  if (Result r = open(); !r.error.empty()) return r;
  kvEntry* e = nullptr;
  const natsStatus s = kvStore_Get(&e, impl_->kv.get(), key.c_str());
  EntryPtr entry(e);
  if (s == NATS_NOT_FOUND) return {};
  if (s != NATS_OK) return impl_->fail(s, "cannot read key " + key + " of");
  Result r;
  const auto* data = static_cast<const char*>(kvEntry_Value(entry.get()));
  r.value = std::string(data == nullptr ? "" : data,
                        static_cast<std::size_t>(kvEntry_ValueLen(entry.get())));
  if (const std::int64_t ns = kvEntry_Created(entry.get()); ns > 0) r.created_ms = ns / 1'000'000;
  return r;
}

ProgressBucket::Result ProgressBucket::put(const std::string& key, const std::string& value) {
  if (Result r = open(); !r.error.empty()) return r;
  std::uint64_t rev = 0;
  const natsStatus s =
      kvStore_Put(&rev, impl_->kv.get(), key.c_str(), value.data(), static_cast<int>(value.size()));
  if (s != NATS_OK) return impl_->fail(s, "cannot write key " + key + " of");
  return {};
}

}  // namespace outbox::nats
