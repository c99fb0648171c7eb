// The value kinds of librdkafka properties (properties_file.hpp): -X PROPERTY=VALUE, and
// --kafka-config's file, the one flag whose parsing reads a file.
#include "properties_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string_view>

namespace outbox::app::flags {

namespace {
// librdkafka's property names: lower case words, dots, underscores, digits. Anything else is no
// property of librdkafka, whose error would quote it (maybe a secret typed in the wrong place).
bool property_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}
}  // namespace

Flag property(std::string name, std::vector<std::pair<std::string, std::string>>& target,
              std::string help) {
  return Flag(std::move(name), "PROPERTY=VALUE", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                auto eq = value.find('=');
                if (eq == std::string::npos || eq == 0) {
                  throw rejected(flag,
                                 "expected PROPERTY=VALUE (the value is not shown: it may "
                                 "hold a secret)");
                }
                if (!property_name(std::string_view(value).substr(0, eq))) {
                  throw rejected(flag,
                                 "expected PROPERTY=VALUE with a librdkafka property name "
                                 "(lower case, digits, '.', '_') before '=' (the value is "
                                 "not shown: it may hold a secret)");
                }
                target.emplace_back(value.substr(0, eq), value.substr(eq + 1));
              })
      .argv_only();
}

Flag properties_file(std::string name, std::vector<std::pair<std::string, std::string>>& target,
                     std::vector<std::string>& warnings, std::string help) {
  return {std::move(name), "FILE", std::move(help),
          [&target, &warnings](const std::string& flag, const std::string& path) {
            if (path.empty()) throw rejected(flag, "must not be empty");
            // Without blocking: a FIFO would wait for a writer. Checked on what was opened.
            const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            if (fd < 0) {
              throw rejected(flag, "cannot read " + path + ": " + std::strerror(errno));
            }
            struct stat st {};
            const int stat_rc = ::fstat(fd, &st);
            const int stat_errno = errno;
            if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
              ::close(fd);
              throw rejected(flag, stat_rc != 0
                                       ? "cannot read " + path + ": " + std::strerror(stat_errno)
                                       : path + " is not a regular file");
            }
            // Its group may read it only when that is the relay's own primary group (a
            // Kubernetes secret volume with fsGroup: mode 0440, group = the pod's).
            const bool group_reads = (st.st_mode & S_IRGRP) != 0 && st.st_gid != ::getegid();
            if ((st.st_mode & S_IROTH) != 0 || group_reads) {
              warnings.push_back(flag + ": " + path +
                                 " may be read by its group or by others (it may hold secrets: "
                                 "chmod 600 it, or use systemd credentials)");
            }
            std::string content;
            char buf[4096];
            for (;;) {
              const ssize_t n = ::read(fd, buf, sizeof buf);
              if (n < 0 && errno == EINTR) continue;
              if (n < 0) {
                const int read_errno = errno;
                ::close(fd);
                throw rejected(flag, "cannot read " + path + ": " + std::strerror(read_errno));
              }
              if (n == 0) break;
              content.append(buf, static_cast<std::size_t>(n));
              if (content.size() > (1u << 20)) {
                ::close(fd);
                throw rejected(flag, path + " is larger than 1 MiB");
              }
            }
            ::close(fd);
            std::istringstream in(content);
            const auto trim = [](std::string_view s) {
              const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
              while (!s.empty() && blank(s.front())) s.remove_prefix(1);
              while (!s.empty() && blank(s.back())) s.remove_suffix(1);
              return std::string(s);
            };
            std::vector<std::pair<std::string, std::string>> read;
            std::string line;
            for (std::size_t number = 1; std::getline(in, line); ++number) {
              const std::string text = trim(line);
              if (text.empty() || text[0] == '#') continue;
              const auto eq = text.find('=');
              const std::string where = path + ":" + std::to_string(number);
              // The line itself is never shown: it may hold a password.
              if (eq == std::string::npos) {
                throw rejected(flag, where + ": expected PROPERTY=VALUE (the line is not shown)");
              }
              std::string key = trim(std::string_view(text).substr(0, eq));
              if (key.empty()) throw rejected(flag, where + ": no property name before '='");
              if (!property_name(key)) {
                throw rejected(flag, where + ": not a librdkafka property name before '=' (the " +
                                         "line is not shown)");
              }
              read.emplace_back(std::move(key), trim(std::string_view(text).substr(eq + 1)));
            }
            if (in.bad()) {
              throw rejected(flag, "cannot read " + path + ": " + std::strerror(errno));
            }
            target = std::move(read);
          }};
}

}  // namespace outbox::app::flags
