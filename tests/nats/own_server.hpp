// A nats-server of a test's own, for the security tests of the nats label (the publisher's,
// security_test.cpp, and the relay's, relay_security_test.cpp): random port, its own JetStream
// store in the test's temporary directory, a configuration with users (an NKey, a password) or
// mutual TLS. The NKey is the example pair of the NATS documentation; the certificates are made
// by openssl for the test (a CA, the server's for 127.0.0.1, a client's).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace outbox_test::nats {

inline constexpr const char* kSeed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY";
inline constexpr const char* kPublicKey =
    "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";
// A valid user seed whose public key is no user of users_config(): a wrong identity (made for
// these tests: prefix, a SHA-256 as the Ed25519 seed, CRC16).
inline constexpr const char* kOtherSeed =
    "SUAFTSSR6VZBUX2TKFHP5WSU3M7TFUZMG2ANEQXODNPP4AIE6LZ6ODZ6EI";
// The password user of users_config(), allowed everything (streams, reading back).
inline constexpr const char* kAdmin = "admin:adminpw";

inline std::string server_binary() {
  const char* v = std::getenv("OUTBOX_NATS_SERVER");
  return v != nullptr ? v : "/usr/sbin/nats-server";
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The subjects the relay publishes to for its progress record in the default bucket
// (docs/jetstream.md, permissions): JetStream's API for that bucket's stream, and its keys.
inline std::vector<std::string> progress_bucket_subjects() {
  return {"$JS.API.STREAM.INFO.KV_outbox-relay-progress",
          "$JS.API.STREAM.CREATE.KV_outbox-relay-progress",
          "$JS.API.DIRECT.GET.KV_outbox-relay-progress.>",
          "$JS.API.STREAM.MSG.GET.KV_outbox-relay-progress", "$KV.outbox-relay-progress.>"};
}

// Users: admin (password, everything) and the relay's NKey user, which may publish to
// `publish_allow` and `more` only (and receive its acknowledgements on _INBOX.>).
inline std::string users_config(const std::string& publish_allow,
                                const std::vector<std::string>& more = {}) {
  std::string allow = "\"" + publish_allow + "\"";
  for (const std::string& m : more) allow += ", \"" + m + "\"";
  return std::string(R"(
authorization {
  users = [
    { user: admin, password: adminpw }
    { nkey: )") +
         kPublicKey + R"(
      permissions: { publish: { allow: [)" +
         allow + R"(] }, subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
)";
}

// Makes ca.pem, server.pem/server.key (127.0.0.1) and client.pem/client.key in `dir`; false if
// openssl failed.
inline bool make_test_certificates(const std::string& dir) {
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  const std::string cmd =
      "cd " + dir + " && openssl req -x509 " + ec +
      " -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem && "
      "openssl req -new " +
      ec +
      " -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
      "printf 'subjectAltName=IP:127.0.0.1' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile san.ext -out server.pem && "
      "openssl req -new " +
      ec +
      " -subj /CN=relay -keyout client.key -out client.csr && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-out client.pem";
  return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
}

// A server that requires TLS with a client certificate signed by the CA of `dir`.
inline std::string mutual_tls_config(const std::string& dir) {
  return "tls {\n  cert_file: \"" + dir + "/server.pem\"\n  key_file: \"" + dir +
         "/server.key\"\n  ca_file: \"" + dir + "/ca.pem\"\n  verify: true\n}\n";
}

// A nats-server of the test's own, stopped (SIGTERM, then SIGKILL) when it goes.
class OwnServer {
 public:
  // `config`: the configuration after listen and jetstream (authorization, tls).
  OwnServer(const std::string& dir, const std::string& config) : dir_(dir) {
    using namespace std::chrono_literals;
    const std::string conf = dir_ + "/nats.conf";
    log_ = dir_ + "/nats.log";
    write_text(conf,
               "listen: 127.0.0.1:-1\njetstream { store_dir: \"" + dir_ + "/js\" }\n" + config);
    pid_ = ::fork();
    if (pid_ == 0) {
      // Dies with the test process, and keeps none of its output pipes open.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string bin = server_binary();
      ::execl(bin.c_str(), bin.c_str(), "-c", conf.c_str(), "-l", log_.c_str(),
              static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    const std::regex listening(R"(Listening for client connections on 127\.0\.0\.1:(\d+))");
    while (std::chrono::steady_clock::now() < deadline && port_.empty()) {
      const std::string text = log();
      std::smatch m;
      if (std::regex_search(text, m, listening) &&
          text.find("Server is ready") != std::string::npos) {
        port_ = m[1];
        break;
      }
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  ~OwnServer() {
    using namespace std::chrono_literals;
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (::waitpid(pid_, nullptr, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  OwnServer(const OwnServer&) = delete;
  OwnServer& operator=(const OwnServer&) = delete;

  bool up() const { return !port_.empty(); }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string host_port() const { return "127.0.0.1:" + port_; }

 private:
  std::string dir_;
  std::string log_;
  pid_t pid_ = -1;
  std::string port_;
};

}  // namespace outbox_test::nats
