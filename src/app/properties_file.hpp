// The value kinds of librdkafka properties: -X PROPERTY=VALUE and --kafka-config FILE. The file's
// reader is the one part of parsing a command line that does I/O: it reads the file when the flag
// is applied.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "flags.hpp"

namespace outbox::app::flags {

// A file of librdkafka properties, as kcat -F reads one: PROPERTY=VALUE lines (the name and the
// value trimmed of surrounding blanks), '#' comment lines and blank lines. Read when the flag is
// applied; the last file given replaces `target`. Errors name the flag and FILE:LINE, never the
// line's text (it may hold a secret). Symbolic links are followed (Kubernetes mounts secrets
// through them), but what is opened must be a regular file (never a FIFO or a device: opened
// without blocking, then checked). A file that others, or a group other than the process's
// primary group, may read is read, with a line appended to `warnings`.
Flag properties_file(std::string name, std::vector<std::pair<std::string, std::string>>& target,
                     std::vector<std::string>& warnings, std::string help);
// PROPERTY=VALUE, repeatable: appended to `target`. Argv only. A malformed value is never echoed
// (-X sasl.password:secret).
Flag property(std::string name, std::vector<std::pair<std::string, std::string>>& target,
              std::string help);

}  // namespace outbox::app::flags
