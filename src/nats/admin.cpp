// The blocking admin calls of the module (setup, the tools, the tests): the stream made or
// checked, subjects matched, a stream read back.
#include <nats/nats.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "outbox/nats/publisher.hpp"
#include "outbox/nats/stream_client.hpp"
#include "session.hpp"

namespace outbox::nats {

using namespace detail;

// ---- admin ----------------------------------------------------------------------------------

std::string ensure_stream(const PublisherConfig& config, const std::string& name,
                          const std::vector<std::string>& subjects,
                          std::chrono::milliseconds duplicate_window,
                          std::chrono::milliseconds timeout) {
  try {
    const std::int64_t dup_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(duplicate_window).count();
    FoundStream found = find_or_create_stream(config, name, subjects, dup_ns, timeout);
    if (found.missing || !found.error.empty()) return found.error;
    // It exists: add the subjects it lacks and set the duplicate window.
    jsStreamConfig sc = *found.info->Config;
    std::vector<const char*> subj(sc.Subjects, sc.Subjects + sc.SubjectsLen);
    for (const auto& x : subjects) {
      if (std::none_of(subj.begin(), subj.end(), [&](const char* c) { return x == c; })) {
        subj.push_back(x.c_str());
      }
    }
    if (sc.Duplicates == dup_ns && static_cast<int>(subj.size()) == sc.SubjectsLen) return {};
    sc.Subjects = subj.data();
    sc.SubjectsLen = static_cast<int>(subj.size());
    sc.Duplicates = dup_ns;
    jsStreamInfo* updated = nullptr;
    const natsStatus s =
        js_UpdateStream(&updated, found.session.js.get(), &sc, nullptr, &found.code);
    StreamInfoPtr updated_ptr(updated);
    if (s != NATS_OK) return "cannot update JetStream stream " + name + ": " + last_error(s);
    return {};
  } catch (const ConfigError& e) {
    return e.what();
  }
}

namespace {

std::vector<std::string_view> tokens(std::string_view subject) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = subject.find('.', start);
    out.push_back(subject.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// "2m", "90s", "1500ms": a duration as the flags write it.
std::string duration_text(std::int64_t ns) {
  const std::int64_t ms = ns / 1'000'000;
  if (ms % 60'000 == 0 && ms > 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1'000 == 0 && ms > 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

bool subject_captures(std::string_view pattern, std::string_view filter) {
  const auto p = tokens(pattern);
  const auto f = tokens(filter);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == ">") return i < f.size();  // one or more tokens, whatever they are
    if (i >= f.size()) return false;
    if (p[i] == "*") {
      if (f[i] == ">") return false;  // one token cannot capture several
      continue;
    }
    if (p[i] != f[i]) return false;
  }
  return p.size() == f.size();
}

StreamCheck create_or_check_stream(const PublisherConfig& config, const std::string& name,
                                   const std::vector<std::string>& subjects,
                                   std::chrono::milliseconds duplicate_window,
                                   std::chrono::milliseconds timeout) {
  const std::string stream = "JetStream stream " + name;
  try {
    const std::int64_t dup_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(duplicate_window).count();
    const FoundStream found = find_or_create_stream(config, name, subjects, dup_ns, timeout);
    if (found.missing && !found.error.empty() && found.code == JSStreamSubjectOverlapErr) {
      std::string listed;
      for (const auto& x : subjects) listed += (listed.empty() ? "" : ", ") + x;
      return {false, "cannot create " + stream + ": another stream already captures some of " +
                         listed + " (a subject goes to one stream): name that stream with " +
                         "--nats-stream, and setup checks it"};
    }
    if (!found.error.empty()) return {false, found.error};
    if (found.missing) return {true, {}};
    const jsStreamConfig& sc = *found.info->Config;
    std::string has;
    for (int i = 0; i < sc.SubjectsLen; ++i) has += std::string(i ? ", " : "") + sc.Subjects[i];
    for (const std::string& x : subjects) {
      const bool captured = std::any_of(sc.Subjects, sc.Subjects + sc.SubjectsLen,
                                        [&](const char* p) { return subject_captures(p, x); });
      if (!captured) {
        return {false, stream + " exists but does not capture " + x +
                           " (its subjects: " + (has.empty() ? "none" : has) +
                           "): add the subject to it, or choose another --nats-stream"};
      }
    }
    if (sc.Storage != js_FileStorage) {
      return {false, stream +
                         " exists but keeps its messages in memory: a server restart would lose "
                         "acknowledged events; the outbox needs a stream with file storage"};
    }
    if (sc.Duplicates < dup_ns) {
      return {false, stream + " exists but its duplicate window is " +
                         duration_text(sc.Duplicates) + ", shorter than " + duration_text(dup_ns) +
                         " (--nats-duplicate-window): events the relay sends again after a "
                         "crash would be stored twice past it; raise the stream's "
                         "duplicate_window, or ask for less"};
    }
    return {false, {}};
  } catch (const ConfigError& e) {
    return {false, e.what()};
  }
}

// ---- reading a stream back (stream_client.hpp) ---------------------------------------------

struct StreamClient::Impl {
  BlockingSession session;

  // Throws std::runtime_error naming the stream when it cannot be read.
  StreamInfoPtr info(const std::string& stream) const {
    natsStatus s = NATS_OK;
    jsErrCode code{};
    StreamInfoPtr si = stream_info(session.js.get(), stream, s, code);
    if (s != NATS_OK) {
      throw std::runtime_error("cannot read JetStream stream " + stream + ": " + last_error(s));
    }
    return si;
  }
};

StreamClient::StreamClient(const PublisherConfig& config, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  try {
    impl_->session = connect_blocking(config, timeout);
  } catch (const ConfigError& e) {
    throw std::runtime_error(e.what());
  }
}

StreamClient::~StreamClient() = default;

StreamState StreamClient::state(const std::string& stream) {
  const StreamInfoPtr si = impl_->info(stream);
  return {si->State.Msgs, si->State.FirstTime, si->State.LastTime};
}

void StreamClient::remove(const std::string& stream) {
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_DeleteStream(impl_->session.js.get(), stream.c_str(), nullptr, &code);
  if (s != NATS_OK) {
    throw std::runtime_error("cannot delete JetStream stream " + stream + ": " + last_error(s));
  }
}

std::vector<StoredMessage> StreamClient::messages(const std::string& stream) {
  const StreamInfoPtr si = impl_->info(stream);
  jsCtx* js = impl_->session.js.get();
  jsErrCode code = static_cast<jsErrCode>(0);
  std::vector<StoredMessage> out;
  const std::uint64_t last = si->State.LastSeq;
  for (std::uint64_t seq = si->State.FirstSeq; seq != 0 && seq <= last; ++seq) {
    natsMsg* raw = nullptr;
    const natsStatus s = js_GetMsg(&raw, js, stream.c_str(), seq, nullptr, &code);
    MsgPtr m(raw);
    if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) continue;  // deleted
    if (s != NATS_OK) {
      throw std::runtime_error("cannot read message " + std::to_string(seq) + " of " + stream +
                               ": " + last_error(s));
    }
    StoredMessage st;
    st.seq = seq;
    st.subject = natsMsg_GetSubject(m.get());
    st.data.assign(natsMsg_GetData(m.get()),
                   static_cast<std::size_t>(natsMsg_GetDataLength(m.get())));
    const char** keys = nullptr;
    int n = 0;
    if (natsMsgHeader_Keys(m.get(), &keys, &n) == NATS_OK) {
      for (int i = 0; i < n; ++i) {
        const char** values = nullptr;
        int nv = 0;
        if (natsMsgHeader_Values(m.get(), keys[i], &values, &nv) == NATS_OK) {
          for (int j = 0; j < nv; ++j) st.headers.emplace_back(keys[i], values[j]);
          std::free(static_cast<void*>(values));
        }
      }
      std::free(static_cast<void*>(keys));
    }
    out.push_back(std::move(st));
  }
  return out;
}

SubjectIds StreamClient::read_ids(const std::string& subject, std::int64_t since_ns,
                                  const std::function<void(std::string_view)>& on_id,
                                  std::chrono::milliseconds timeout) {
  using SubPtr =
      std::unique_ptr<natsSubscription, Deleter<natsSubscription, natsSubscription_Destroy>>;
  using NamesPtr =
      std::unique_ptr<jsStreamNamesList, Deleter<jsStreamNamesList, jsStreamNamesList_Destroy>>;
  using ConsumerInfoPtr =
      std::unique_ptr<jsConsumerInfo, Deleter<jsConsumerInfo, jsConsumerInfo_Destroy>>;
  using MetaPtr = std::unique_ptr<jsMsgMetaData, Deleter<jsMsgMetaData, jsMsgMetaData_Destroy>>;
  jsCtx* js = impl_->session.js.get();
  SubjectIds out;
  const auto failed = [&](const std::string& what, natsStatus s) {
    return std::runtime_error(what + " subject " + subject + ": " + last_error(s));
  };
  // The stream capturing the subject (the server's subject filter; none: NATS_NOT_FOUND).
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Stream.Info.SubjectsFilter = subject.c_str();
  jsStreamNamesList* raw_names = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_StreamNames(&raw_names, js, &jo, &code);
  const NamesPtr names(raw_names);
  if (s == NATS_NOT_FOUND || (s == NATS_OK && (!names || names->Count == 0))) return out;
  if (s != NATS_OK) throw failed("cannot find the JetStream stream of", s);
  out.stream = names->List[0];

  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = out.stream.c_str();
  so.Ordered = true;
  so.Config.HeadersOnly = true;
  if (since_ns > 0) {
    so.Config.DeliverPolicy = js_DeliverByStartTime;
    so.Config.OptStartTime = since_ns;
  }
  natsSubscription* raw_sub = nullptr;
  s = js_SubscribeSync(&raw_sub, js, subject.c_str(), nullptr, &so, &code);
  const SubPtr sub(raw_sub);
  if (s != NATS_OK) throw failed("cannot read (ordered consumer on stream " + out.stream + ")", s);
  jsConsumerInfo* raw_ci = nullptr;
  s = natsSubscription_GetConsumerInfo(&raw_ci, sub.get(), nullptr, &code);
  const ConsumerInfoPtr ci(raw_ci);
  if (s != NATS_OK) throw failed("cannot read the consumer of", s);
  // Nothing stored since: nothing delivered and nothing pending. Else read until a message says
  // nothing more is pending.
  if (ci->NumPending == 0 && ci->Delivered.Consumer == 0) return out;
  const int wait_ms = static_cast<int>(std::max<std::int64_t>(1, timeout.count()));
  for (;;) {
    natsMsg* raw = nullptr;
    s = natsSubscription_NextMsg(&raw, sub.get(), wait_ms);
    MsgPtr m(raw);
    if (s != NATS_OK) {
      throw failed("no message for " + std::to_string(timeout.count()) + " ms after " +
                       std::to_string(out.messages) + " read, on",
                   s);
    }
    ++out.messages;
    const char* id = nullptr;
    if (natsMsgHeader_Get(m.get(), "id", &id) == NATS_OK && id != nullptr) {
      on_id(id);
    } else if (natsMsgHeader_Get(m.get(), "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) {
      on_id(id);
    } else {
      ++out.without_id;
    }
    jsMsgMetaData* raw_meta = nullptr;
    if (natsMsg_GetMetaData(&raw_meta, m.get()) != NATS_OK) {
      throw failed("a message without JetStream metadata on", NATS_ERR);
    }
    const MetaPtr meta(raw_meta);
    if (meta->NumPending == 0) return out;
  }
}

}  // namespace outbox::nats
