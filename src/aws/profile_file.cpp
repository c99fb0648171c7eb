#include "profile_file.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "outbox/aws/credentials.hpp"
#include "outbox/common/log_text.hpp"

namespace outbox::aws {
namespace {

using common::quoted;

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

bool has_blank(std::string_view name) {
  return name.find_first_of(" \t") != std::string_view::npos;
}

bool is_comment_start(char c) { return c == '#' || c == ';'; }

// A value's comment starts at a '#' or ';' that follows whitespace ("value ; note"); one right
// after the value ("value;x") belongs to it.
std::string_view strip_value_comment(std::string_view value) {
  for (std::size_t i = 1; i < value.size(); ++i) {
    if (is_comment_start(value[i]) && is_blank(value[i - 1])) return trim(value.substr(0, i));
  }
  return value;
}

class Parser {
 public:
  Parser(ProfileFileKind kind, std::string path) : file_{std::move(path), kind, {}} {}

  void line(std::string_view text, std::size_t number) {
    number_ = number;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    const std::string_view trimmed = trim(text);
    if (trimmed.empty()) return;
    if (is_comment_start(trimmed.front())) return;
    if (is_blank(text.front())) {
      continuation(trimmed);
    } else if (text.front() == '[') {
      section(text);
    } else {
      property(text);
    }
  }

  ProfileFile finish() {
    // [profile default] wins over [default] in the config file, wherever each stands.
    if (!prefixed_default_) {
      if (auto plain = file_.profiles.extract(std::string(kPlainDefault))) {
        plain.key() = "default";
        file_.profiles.insert(std::move(plain));
      }
    } else {
      file_.profiles.erase(std::string(kPlainDefault));
    }
    return std::move(file_);
  }

 private:
  // A key no profile name can have (it holds whitespace): the config file's [default] until the
  // end shows whether a [profile default] overrides it.
  static constexpr std::string_view kPlainDefault = "\n[default]";

  [[noreturn]] void fail(std::string_view what) const {
    throw CredentialsError("aws: " + describe(file_.kind, file_.path) + " line " +
                           std::to_string(number_) + ": " + std::string(what));
  }

  void section(std::string_view text) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) fail("a section without its closing ']'");
    const std::string_view after = trim(text.substr(close + 1));
    if (!after.empty() && !is_comment_start(after.front())) {
      fail("text after a section's ']' that is not a comment");
    }
    const std::string_view inside = trim(text.substr(1, close - 1));
    seen_section_ = true;
    in_property_ = false;
    in_profile_ = false;
    std::string_view name;
    if (file_.kind == ProfileFileKind::kCredentials) {
      name = inside;
    } else if (inside == "default") {
      name = kPlainDefault;
    } else if (inside.starts_with("profile") && inside.size() > 7 && is_blank(inside[7])) {
      name = trim(inside.substr(7));
      if (name == "default") prefixed_default_ = true;
    } else {
      return;  // sso-session, services, another section, or a name without "profile "
    }
    if (name.empty() || (name != kPlainDefault && has_blank(name))) return;
    profile_ = &file_.profiles[std::string(name)];
    in_profile_ = true;
  }

  void property(std::string_view text) {
    if (!seen_section_) fail("a property before any [section]");
    const std::size_t equals = text.find('=');
    if (equals == std::string_view::npos) fail("a property without '=' (name = value)");
    const std::string_view name = trim(text.substr(0, equals));
    if (name.empty()) fail("a property without a name");
    const std::string_view value = strip_value_comment(trim(text.substr(equals + 1)));
    in_property_ = true;
    sub_properties_ = value.empty();
    current_ = nullptr;
    if (!in_profile_ || has_blank(name)) return;
    current_ = &(*profile_)[std::string(name)];
    *current_ = value;
  }

  void continuation(std::string_view trimmed) {
    if (!in_property_) fail("an indented line outside a property");
    if (sub_properties_) {
      const std::size_t equals = trimmed.find('=');
      if (equals == std::string_view::npos) fail("a sub-property without '=' (name = value)");
      if (trim(trimmed.substr(0, equals)).empty()) fail("a sub-property without a name");
      return;  // nothing here reads sub-properties
    }
    if (current_ != nullptr) {
      *current_ += '\n';
      *current_ += trimmed;
    }
  }

  ProfileFile file_;
  std::size_t number_ = 0;
  std::map<std::string, std::string>* profile_ = nullptr;
  std::string* current_ = nullptr;
  bool in_profile_ = false;
  bool in_property_ = false;
  bool sub_properties_ = false;
  bool prefixed_default_ = false;
  bool seen_section_ = false;
};

}  // namespace

std::string describe(ProfileFileKind kind, std::string_view path) {
  return std::string(kind == ProfileFileKind::kCredentials ? "shared credentials file "
                                                           : "config file ") +
         quoted(path);
}

ProfileFile parse_profile_file(std::string_view text, ProfileFileKind kind, std::string path) {
  Parser parser(kind, std::move(path));
  std::size_t number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    parser.line(text.substr(start, end - start), ++number);
    start = end + 1;
  }
  return parser.finish();
}

std::optional<ProfileFile> read_profile_file(const std::string& path, ProfileFileKind kind) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) return std::nullopt;
  if (error) {
    throw CredentialsError("aws: cannot read the " + describe(kind, path) + ": " + error.message());
  }
  if (std::filesystem::is_directory(status)) {
    throw CredentialsError("aws: the " + describe(kind, path) + " is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (!in.is_open() || in.bad()) {
    throw CredentialsError("aws: cannot read the " + describe(kind, path));
  }
  return parse_profile_file(text, kind, path);
}

}  // namespace outbox::aws
