// The shared files' INI form as the AWS SDKs read it. The rules are those of the SDKs' common
// profile-parser test suite (parser-tests.json, as carried by e.g. awslabs/aws-sdk-kotlin's
// runtime/config profile tests): comments, continuations, sub-properties, section prefixes,
// merging, and the errors, which name the line and never its text.
#include "aws/profile_file.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "outbox/aws/credentials.hpp"

namespace outbox::aws {
namespace {

using Properties = std::map<std::string, std::string>;
using Profiles = std::map<std::string, Properties>;

Profiles config(std::string_view text) {
  return parse_profile_file(text, ProfileFileKind::kConfig, "/c").profiles;
}
Profiles credentials(std::string_view text) {
  return parse_profile_file(text, ProfileFileKind::kCredentials, "/k").profiles;
}
std::string error(std::string_view text, ProfileFileKind kind = ProfileFileKind::kConfig) {
  try {
    parse_profile_file(text, kind, "/c");
  } catch (const CredentialsError& e) {
    return e.what();
  }
  return "";
}

TEST(ProfileFile, PropertiesAreTrimmedAndKeepEqualsSigns) {
  EXPECT_EQ(config(""), Profiles{});
  EXPECT_EQ(config("[profile foo]"), (Profiles{{"foo", {}}}));
  EXPECT_EQ(config("[profile foo]\r\nname \t=  \tval=ue \t\r\nempty =\r\n"),
            (Profiles{{"foo", {{"name", "val=ue"}, {"empty", ""}}}}));
  EXPECT_EQ(config("\t \n[profile foo]\n\t\n \nname = value\n\t \n[profile bar]\n \t"),
            (Profiles{{"foo", {{"name", "value"}}}, {"bar", {}}}));
}

TEST(ProfileFile, CommentsStartALineFollowASectionOrFollowWhitespaceInAValue) {
  EXPECT_EQ(config("# comment\n; comment\n[profile foo] # comment\n"
                   "a = value # comment with # sign\n"
                   "b = value ; comment with ; sign\n"
                   "c = value;adjacent\n"
                   "d = value#adjacent\n"
                   "e = value\t;tab\n"
                   "[profile bar]; adjacent\n"
                   "[profile baz]# adjacent\n"),
            (Profiles{{"foo",
                       {{"a", "value"},
                        {"b", "value"},
                        {"c", "value;adjacent"},
                        {"d", "value#adjacent"},
                        {"e", "value"}}},
                      {"bar", {}},
                      {"baz", {}}}));
}

TEST(ProfileFile, IndentedLinesContinueAValueOrHoldSubProperties) {
  EXPECT_EQ(config("[profile foo]\nname = value\n -continued # kept\n \t -and-continued \t"),
            (Profiles{{"foo", {{"name", "value\n-continued # kept\n-and-continued"}}}}));
  EXPECT_EQ(config("[default]\ns3 =\n max_concurrent_requests = 10\n\t \n name =\nregion = x"),
            (Profiles{{"default", {{"s3", ""}, {"region", "x"}}}}));
}

TEST(ProfileFile, ConfigProfilesReadProfilePrefixOrDefault) {
  EXPECT_EQ(config("[default]\na = 1\n"
                   "[profile foo]\nb = 2\n"
                   "[profile\tbar]\nc = 3\n"
                   "[   profile baz    ]\nd = 4\n"
                   "[qux]\ne = 5\n"
                   "[profilefoo]\nf = 6\n"
                   "[profile in valid]\ng = 7\n"
                   "[sso-session s]\nh = 8\n"
                   "[services x]\ns3 =\n  endpoint_url = http://127.0.0.1\n"
                   "[profile foo]\nin valid = 9\n"),
            (Profiles{{"default", {{"a", "1"}}},
                      {"foo", {{"b", "2"}}},
                      {"bar", {{"c", "3"}}},
                      {"baz", {{"d", "4"}}}}));
}

TEST(ProfileFile, ProfileDefaultWinsOverDefaultWhereverItStands) {
  EXPECT_EQ(config("[profile default]\nname = value\n[default]\nname2 = value2"),
            (Profiles{{"default", {{"name", "value"}}}}));
  EXPECT_EQ(config("[default]\nname2 = value2\n[profile default]\nname = value"),
            (Profiles{{"default", {{"name", "value"}}}}));
}

TEST(ProfileFile, RepeatedSectionsMergeAndTheLastValueWins) {
  EXPECT_EQ(config("[profile foo]\nname = value\n[profile foo]\nname2 = value2\nname = value3"),
            (Profiles{{"foo", {{"name", "value3"}, {"name2", "value2"}}}}));
}

TEST(ProfileFile, CredentialsProfilesHaveNoPrefix) {
  EXPECT_EQ(credentials("[foo]\na = 1\n[profile bar]\nb = 2\n[   default  ]\nc = 3"),
            (Profiles{{"foo", {{"a", "1"}}}, {"default", {{"c", "3"}}}}));
}

TEST(ProfileFile, ErrorsNameTheFileAndTheLine) {
  EXPECT_EQ(error("name = value"),
            "aws: config file \"/c\" line 1: a property before any [section]");
  EXPECT_NE(error("[profile foo").find("line 1: a section without its closing ']'"),
            std::string::npos);
  EXPECT_NE(error("[profile foo] x").find("line 1: text after a section's ']'"), std::string::npos);
  EXPECT_NE(error("[profile foo]\nkey : value").find("line 2: a property without '='"),
            std::string::npos);
  EXPECT_NE(error("[profile foo]\n= value").find("line 2: a property without a name"),
            std::string::npos);
  EXPECT_NE(error(" -continued").find("line 1: an indented line outside a property"),
            std::string::npos);
  EXPECT_NE(error("[profile foo]\n -continued").find("line 2: an indented line"),
            std::string::npos);
  // A section ends the property before it.
  EXPECT_NE(error("[profile foo]\nname = value\n[profile foo]\n -continued").find("line 4"),
            std::string::npos);
  EXPECT_NE(error("[profile foo]\ns3 =\n invalid").find("line 3: a sub-property without '='"),
            std::string::npos);
  EXPECT_NE(error("[profile foo]\ns3 =\n = value").find("line 3: a sub-property without a name"),
            std::string::npos);
}

TEST(ProfileFile, AnErrorNeverQuotesTheLine) {
  const std::string message = error(
      "[default]\naws_access_key_id = AKIDEXAMPLE\n"
      "aws_secret_access_key wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n",
      ProfileFileKind::kCredentials);
  EXPECT_EQ(message,
            "aws: shared credentials file \"/c\" line 3: a property without '=' (name = value)");
}

}  // namespace
}  // namespace outbox::aws
