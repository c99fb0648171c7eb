// The real outbox-relay binary as a child process, its stdout and stderr in a log file.
// Thread-safety: one thread uses a RelayProcess. The destructor SIGKILLs a child still running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace outbox_test {

class RelayProcess {
 public:
  // Starts `binary` with `args`. stdout and stderr go to `log_path` (appended), or stderr to
  // `stderr_path` when given. The child gets SIGKILL if the test process dies.
  RelayProcess(const std::string& binary, const std::vector<std::string>& args,
               std::string log_path, std::optional<std::string> stderr_path = std::nullopt);
  ~RelayProcess();
  RelayProcess(const RelayProcess&) = delete;
  RelayProcess& operator=(const RelayProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool is_running();
  // Exit code once the child ended within `timeout` (128 + signal number if a signal ended it);
  // nullopt if it is still running.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  // SIGTERM, then wait_exit(timeout).
  std::optional<int> terminate(std::chrono::milliseconds timeout);
  // SIGKILL and reap.
  void kill9();

 private:
  bool reap(bool block);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// Last `max_lines` lines of a file (for failure messages); a note if it cannot be read.
std::string tail_file(const std::string& path, std::size_t max_lines);
// Whole file, or empty if it cannot be read.
std::string read_file(const std::string& path);

// A one-shot command of the binary (setup, status, reconcile, prune...) run to its end.
struct CommandResult {
  int exit_code = -1;  // -1: still running after the timeout (then killed)
  std::string out;
  std::string err;
};
// Runs `binary args` with stdout to `out_path` and stderr to `err_path` (both replaced), waits at
// most `timeout`, and returns the exit code and both outputs.
CommandResult run_to_end(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& out_path, const std::string& err_path,
                         std::chrono::milliseconds timeout);

}  // namespace outbox_test
