#include "outbox/relay/progress_record.hpp"

#include <charconv>

namespace outbox::relay {
using pgoutput::Lsn;

// "LSN" (older relays) or "LSN timeline=N" into `out`; anything else is `bad`.
void parse_progress_value(std::string_view v, ProgressRead& out) {
  const std::size_t space = v.find(' ');
  out.last = Lsn::parse(v.substr(0, space));
  out.timeline.reset();
  if (out.last && space != std::string_view::npos) {
    const std::string_view t = v.substr(space + 1);
    std::uint32_t tli = 0;
    const auto [p, ec] = t.starts_with("timeline=")
                             ? std::from_chars(t.data() + 9, t.data() + t.size(), tli)
                             : std::from_chars_result{t.data(), std::errc::invalid_argument};
    if (ec == std::errc() && p == t.data() + t.size()) {
      out.timeline = tli;
    } else {
      out.last.reset();
    }
  }
  out.bad = out.last ? std::string() : std::string(v);
}

std::string progress_value(Lsn lsn, std::optional<std::uint32_t> timeline) {
  return timeline ? lsn.to_string() + " timeline=" + std::to_string(*timeline) : lsn.to_string();
}

std::string progress_key(const std::string& system_id, const std::string& slot) {
  return system_id + "/" + slot;
}

}  // namespace outbox::relay
