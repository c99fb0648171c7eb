#include "outbox_test/relay_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "outbox_test/support.hpp"

namespace outbox_test {

RelayProcess::RelayProcess(const std::string& binary, const std::vector<std::string>& args,
                           std::string log_path, std::optional<std::string> stderr_path)
    : log_path_(std::move(log_path)) {
  std::filesystem::create_directories(std::filesystem::path(log_path_).parent_path());
  if (stderr_path) {
    std::filesystem::create_directories(std::filesystem::path(*stderr_path).parent_path());
  }
  // Everything the child needs is prepared before fork: librdkafka's threads may hold locks
  // (malloc's too), so the child only makes async-signal-safe calls.
  std::vector<std::string> argv_storage;
  argv_storage.push_back(binary);
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const std::string exec_failed = "outbox_test: cannot exec " + binary + "\n";
  const pid_t parent = ::getpid();

  const int out_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out_fd < 0)
    throw std::runtime_error("cannot open " + log_path_ + ": " + std::strerror(errno));
  int err_fd = out_fd;
  if (stderr_path) {
    err_fd = ::open(stderr_path->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      ::close(out_fd);
      throw std::runtime_error("cannot open " + *stderr_path + ": " + std::strerror(errno));
    }
  }

  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(out_fd);
  if (err_fd != out_fd) ::close(err_fd);
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(fork_errno));
  pid_ = pid;
}

RelayProcess::~RelayProcess() {
  if (pid_ > 0 && !exit_code_) kill9();
}

bool RelayProcess::reap(bool block) {
  if (exit_code_) return true;
  int status = 0;
  pid_t result;
  do {
    result = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (result < 0 && errno == EINTR);
  if (result != pid_) return false;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

bool RelayProcess::is_running() { return !reap(false); }

std::optional<int> RelayProcess::wait_exit(std::chrono::milliseconds timeout) {
  wait_until([this] { return reap(false); }, timeout, std::chrono::milliseconds(20));
  return exit_code_;
}

std::optional<int> RelayProcess::terminate(std::chrono::milliseconds timeout) {
  if (!exit_code_) ::kill(pid_, SIGTERM);
  return wait_exit(timeout);
}

void RelayProcess::kill9() {
  if (exit_code_) return;
  ::kill(pid_, SIGKILL);
  reap(true);
}

std::string tail_file(const std::string& path, std::size_t max_lines) {
  std::ifstream in(path);
  if (!in) return "(cannot read " + path + ")";
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

CommandResult run_to_end(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& out_path, const std::string& err_path,
                         std::chrono::milliseconds timeout) {
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  RelayProcess process(binary, args, out_path, err_path);
  CommandResult r;
  r.exit_code = process.wait_exit(timeout).value_or(-1);
  if (r.exit_code == -1) process.kill9();
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

}  // namespace outbox_test
