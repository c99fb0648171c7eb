// The shared config and credentials files' INI form as the AWS SDKs read it (the rules of the SDKs'
// common profile-parser test suite): [section] lines, `name = value` properties (trimmed; '=' may
// recur in the value), comments from '#' or ';' at a line's start, right after a section's ']' or
// after whitespace in a value, values continued on indented lines (joined with '\n'),
// sub-properties under an empty value (parsed, dropped), duplicate sections merged and the last
// value of a property kept. The config file's profiles read [profile NAME] and [default] (a
// [profile default] anywhere wins over [default]); its other sections (sso-session, services,
// unknown) and [NAME] without the prefix are ignored. The credentials file's read [NAME]. A
// profile or property name with whitespace is ignored.
//
// Errors name the file and the line, never the line's text (it may hold a secret).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace outbox::aws {

enum class ProfileFileKind { kCredentials, kConfig };

struct ProfileFile {
  std::string path;
  ProfileFileKind kind = ProfileFileKind::kCredentials;
  std::map<std::string, std::map<std::string, std::string>> profiles;  // name -> property -> value
};

// "shared credentials file \"/path\"" or "config file \"/path\"".
std::string describe(ProfileFileKind kind, std::string_view path);

// Throws CredentialsError naming `path` and the line.
ProfileFile parse_profile_file(std::string_view text, ProfileFileKind kind, std::string path);
// None when nothing is at `path`; throws CredentialsError when it cannot be read or parsed.
std::optional<ProfileFile> read_profile_file(const std::string& path, ProfileFileKind kind);

}  // namespace outbox::aws
