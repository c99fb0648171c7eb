// Fixed and refreshing credentials providers; the default chain is in credential_sources.cpp.
#include "outbox/aws/credentials_provider.hpp"

#include <deque>
#include <optional>

namespace outbox::aws {

namespace {

class FixedProvider final : public CredentialsProvider {
 public:
  explicit FixedProvider(ResolvedCredentials credentials) : credentials_(std::move(credentials)) {}
  void get(Handler handler) override { handler(&credentials_, nullptr); }
  std::string source() const override { return credentials_.source; }

 private:
  ResolvedCredentials credentials_;
};

std::string utc_text(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

class RefreshingProvider final : public CredentialsProvider,
                                 public std::enable_shared_from_this<RefreshingProvider> {
 public:
  RefreshingProvider(boost::asio::any_io_executor executor, CredentialsFetch fetch,
                     RefreshPolicy policy)
      : executor_(std::move(executor)), fetch_(std::move(fetch)), policy_(policy) {}

  void get(Handler handler) override {
    const auto now = std::chrono::system_clock::now();
    if (cached_ && usable(*cached_, now)) {
      // Kept alive through the handler: a fetch that ends inside it replaces cached_.
      const auto current = cached_;
      if (expires_within(*current, now, policy_.prefetch) && !fetching_ &&
          std::chrono::steady_clock::now() >= next_background_) {
        start();
      }
      handler(current.get(), nullptr);
      return;
    }
    waiting_.push_back(std::move(handler));
    if (!fetching_) start();
  }

  std::string source() const override {
    return cached_ ? cached_->source : std::string("the default credentials chain");
  }

 private:
  static bool expires_within(const ResolvedCredentials& c,
                             std::chrono::system_clock::time_point now,
                             std::chrono::seconds margin) {
    return c.expiration && now + margin >= *c.expiration;
  }
  bool usable(const ResolvedCredentials& c, std::chrono::system_clock::time_point now) const {
    return !expires_within(c, now, policy_.stale);
  }

  void start() {
    fetching_ = true;
    fetch_([weak = weak_from_this()](std::variant<ResolvedCredentials, ServiceError> result) {
      if (const auto self = weak.lock()) self->done(std::move(result));
    });
  }

  void done(std::variant<ResolvedCredentials, ServiceError> result) {
    fetching_ = false;
    next_background_ = std::chrono::steady_clock::now() + policy_.retry_interval;
    std::deque<Handler> waiting = std::move(waiting_);
    waiting_.clear();
    if (auto* fresh = std::get_if<ResolvedCredentials>(&result)) {
      const auto now = std::chrono::system_clock::now();
      if (fresh->expiration && *fresh->expiration <= now) {
        ServiceError expired;
        expired.kind = FailureKind::kRetryable;
        expired.code = "ExpiredCredentials";
        expired.message = "the credentials from " + fresh->source + " expired at " +
                          utc_text(*fresh->expiration) + ", before they came (is the clock right?)";
        for (auto& h : waiting) h(nullptr, &expired);
        return;
      }
      // Fresh ones within `stale` of their end are still used by the requests that waited; a
      // source that serves ones within `prefetch` is asked again after retry_interval, not at
      // every request.
      if (!expires_within(*fresh, now, policy_.prefetch)) {
        next_background_ = std::chrono::steady_clock::now();
      }
      cached_ = std::make_shared<const ResolvedCredentials>(std::move(*fresh));
      const auto current = cached_;
      for (auto& h : waiting) h(current.get(), nullptr);
      return;
    }
    const ServiceError& error = std::get<ServiceError>(result);
    for (auto& h : waiting) h(nullptr, &error);
  }

  boost::asio::any_io_executor executor_;
  CredentialsFetch fetch_;
  RefreshPolicy policy_;
  std::shared_ptr<const ResolvedCredentials> cached_;
  bool fetching_ = false;
  std::deque<Handler> waiting_;
  std::chrono::steady_clock::time_point next_background_{};
};

}  // namespace

std::shared_ptr<CredentialsProvider> fixed_credentials(ResolvedCredentials credentials) {
  return std::make_shared<FixedProvider>(std::move(credentials));
}

std::shared_ptr<CredentialsProvider> refreshing_credentials(boost::asio::any_io_executor executor,
                                                            CredentialsFetch fetch,
                                                            RefreshPolicy policy) {
  return std::make_shared<RefreshingProvider>(std::move(executor), std::move(fetch), policy);
}

}  // namespace outbox::aws
