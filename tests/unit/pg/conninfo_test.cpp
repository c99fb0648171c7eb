// The conninfo is checked once at start: libpq's own parse errors quote the text they could not
// read (a password), so a bad one is refused in words of our own, and the secrets of every
// conninfo checked never leave the pg module in an error message.
#include "outbox/pg/conninfo.hpp"

#include <gtest/gtest.h>

#include "outbox/pg/error.hpp"

namespace outbox::pg {
namespace {

TEST(Conninfo, GoodOnesPass) {
  for (const char* c :
       {"host=db port=5432 dbname=app user=relay", "host=db password='a b\\'c' dbname=app",
        "postgresql://relay:s%40cret@db/app", "postgres://db:5432,db2:5433/app?sslmode=verify-full",
        "app", "postgresql:///app?host=/var/run/postgresql", "port=5432,5433 host=a,b"}) {
    EXPECT_EQ(check_conninfo(c), "") << c;
  }
}

TEST(Conninfo, BadOnesAreRefusedWithoutTheirText) {
  struct Case {
    const char* conninfo;
    const char* secret;
    const char* says;
  };
  for (const Case& c : {
           Case{"postgresql://relay:pa%zzsecret1@db/app", "secret1", "not followed by two hex"},
           Case{"host=db password=pa ss secret2word dbname=app", "secret2word", "without '='"},
           Case{"host=db password='secret3", "secret3", "without its closing quote"},
           Case{"postgresql://relay:p@ssecret4@db/app", "ssecret4", "'@' in the URI's user info"},
           Case{"postgresql://relay:pa/secret5@db/app", "secret5", "port that is not a number"},
           Case{"postgresql://relay:secret6/x@db/app", "secret6", "port that is not a number"},
           Case{"postgresql://db/app?password=secret7&sslmode", "secret7", "URI query parameter"},
       }) {
    const std::string problem = check_conninfo(c.conninfo);
    EXPECT_NE(problem, "") << c.conninfo;
    EXPECT_NE(problem.find(c.says), std::string::npos) << c.conninfo << ": " << problem;
    EXPECT_EQ(problem.find(c.secret), std::string::npos) << problem;
    EXPECT_NE(problem.find("not shown"), std::string::npos) << problem;
  }
}

TEST(Conninfo, SecretsOfACheckedConninfoNeverLeaveInAnError) {
  ASSERT_EQ(check_conninfo("host=db password=kv-Secret-1 sslpassword=kv-Secret-2"), "");
  ASSERT_EQ(check_conninfo("postgresql://relay:uri%2DSecret@db/app"), "");
  const Error e(
      "connect to PostgreSQL: something quoted \"kv-Secret-1\" and kv-Secret-2 and "
      "uri%2DSecret and uri-Secret",
      "", true);
  const std::string what = e.what();
  for (const char* s : {"kv-Secret-1", "kv-Secret-2", "uri%2DSecret", "uri-Secret"}) {
    EXPECT_EQ(what.find(s), std::string::npos) << what;
  }
  EXPECT_NE(what.find("***"), std::string::npos) << what;
  const Error wrapped("context with kv-Secret-1", e);
  EXPECT_EQ(std::string(wrapped.what()).find("kv-Secret-1"), std::string::npos) << wrapped.what();
}

// A multi-host --pg, one conninfo per host (status and run look for the standby among them).
TEST(Conninfo, PerHostConninfosSplitsHostsAndPorts) {
  const auto hosts = per_host_conninfos(
      "host=a,b port=5432,5433 dbname=app user=relay password='x y' "
      "target_session_attrs=read-write");
  ASSERT_EQ(hosts.size(), 2u);
  for (const auto& h : hosts) {
    EXPECT_EQ(check_conninfo(h), "") << h;
    EXPECT_NE(h.find("dbname='app'"), std::string::npos) << h;
    EXPECT_NE(h.find("password='x y'"), std::string::npos) << h;
    EXPECT_EQ(h.find("target_session_attrs"), std::string::npos) << h;
  }
  EXPECT_NE(hosts[0].find("host='a' "), std::string::npos) << hosts[0];
  EXPECT_NE(hosts[0].find("port='5432'"), std::string::npos) << hosts[0];
  EXPECT_NE(hosts[1].find("host='b' "), std::string::npos) << hosts[1];
  EXPECT_NE(hosts[1].find("port='5433'"), std::string::npos) << hosts[1];
  // One port for every host; a URI; a single host: nothing to split.
  const auto one_port = per_host_conninfos("host=a,b port=6000 dbname=app");
  ASSERT_EQ(one_port.size(), 2u);
  EXPECT_NE(one_port[1].find("host='b' port='6000'"), std::string::npos) << one_port[1];
  EXPECT_EQ(per_host_conninfos("postgresql://db1:1,db2:2/app").size(), 2u);
  EXPECT_TRUE(per_host_conninfos("host=a port=5432 dbname=app").empty());
  EXPECT_TRUE(per_host_conninfos("app").empty());
}

// The publication check's catalog connection goes to the server the stream reached.
TEST(Conninfo, PinConninfoKeepsOneServer) {
  const std::string pinned =
      pin_conninfo("host=a,b port=5432,5433 dbname=app target_session_attrs=read-write", "b",
                   "10.0.0.2", "5433");
  EXPECT_EQ(check_conninfo(pinned), "") << pinned;
  EXPECT_NE(pinned.find("host='b' hostaddr='10.0.0.2' port='5433'"), std::string::npos) << pinned;
  EXPECT_NE(pinned.find("target_session_attrs='read-write'"), std::string::npos) << pinned;
  EXPECT_EQ(pinned.find("'a'"), std::string::npos) << pinned;
  // A socket directory, no address.
  EXPECT_NE(pin_conninfo("dbname=app", "/run/postgresql", "", "5432")
                .find("host='/run/postgresql' port='5432'"),
            std::string::npos);
}

}  // namespace
}  // namespace outbox::pg
