#include "change_wait.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace outbox::relay {

boost::asio::awaitable<void> ChangeWait::wait(Clock::time_point until) {
  what_ = What::kChange;
  timer_.expires_at(until);
  boost::system::error_code ec;
  co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  what_ = What::kNone;
}

}  // namespace outbox::relay
