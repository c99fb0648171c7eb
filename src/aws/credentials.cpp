#include "outbox/aws/credentials.hpp"

#include <array>
#include <cstdlib>
#include <map>
#include <utility>

#include "outbox/common/log_text.hpp"
#include "profile_file.hpp"

namespace outbox::aws {
namespace {

using common::quoted;

std::string trimmed(std::string text) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && blank(text.back())) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && blank(text[start])) ++start;
  return text.substr(start);
}

// A variable's value without surrounding whitespace (a value read from a file often ends in a
// line break); none when unset or empty, as the SDKs read them.
std::optional<std::string> variable(const EnvLookup& env, std::string_view name) {
  auto value = env(name);
  if (!value) return std::nullopt;
  std::string text = trimmed(std::move(*value));
  if (text.empty()) return std::nullopt;
  return text;
}

// A path from a variable, "~/" standing for HOME as the SDKs allow; else HOME's default.
std::optional<std::string> file_path(const EnvLookup& env, std::string_view variable_name,
                                     std::string_view default_name) {
  const auto home = variable(env, "HOME");
  if (auto path = variable(env, variable_name)) {
    if (home && (*path == "~" || path->starts_with("~/"))) return *home + path->substr(1);
    return path;
  }
  if (!home) return std::nullopt;
  return *home + "/.aws/" + std::string(default_name);
}

// One profile across both files: the credentials file's value wins over the config file's, as in
// the SDKs' merge.
struct Profile {
  std::string name;
  bool explicit_name = false;  // AWS_PROFILE chose it
  // property -> value, and the file it came from
  std::map<std::string, std::pair<std::string, const ProfileFile*>> properties;
  bool found = false;
  std::optional<ProfileFile> credentials_file;
  std::optional<ProfileFile> config_file;
  std::string where;  // the files looked at, for "why not"

  const std::string* value(const std::string& property) const {
    const auto it = properties.find(property);
    return it == properties.end() ? nullptr : &it->second.first;
  }
};

void merge(Profile& profile, const ProfileFile& file) {
  const auto it = file.profiles.find(profile.name);
  if (it == file.profiles.end()) return;
  profile.found = true;
  for (const auto& [name, value] : it->second) profile.properties[name] = {value, &file};
}

// The profile in effect, read into `profile` (its properties point into its files: it is filled in
// place, never copied).
void load_profile(const EnvLookup& env, Profile& profile) {
  const auto name = variable(env, "AWS_PROFILE");
  profile.name = name.value_or("default");
  profile.explicit_name = name.has_value();
  const auto look_at = [&](std::string_view variable_name, std::string_view default_name,
                           ProfileFileKind kind, std::optional<ProfileFile>& file) {
    const auto path = file_path(env, variable_name, default_name);
    if (!profile.where.empty()) profile.where += " or ";
    if (!path) {
      profile.where +=
          std::string(kind == ProfileFileKind::kCredentials ? "the shared credentials file"
                                                            : "the config file") +
          " (HOME and " + std::string(variable_name) + " unset)";
      return;
    }
    file = read_profile_file(*path, kind);
    profile.where += describe(kind, *path) + (file ? "" : " (missing)");
  };
  look_at("AWS_SHARED_CREDENTIALS_FILE", "credentials", ProfileFileKind::kCredentials,
          profile.credentials_file);
  look_at("AWS_CONFIG_FILE", "config", ProfileFileKind::kConfig, profile.config_file);
  if (profile.config_file) merge(profile, *profile.config_file);
  if (profile.credentials_file) merge(profile, *profile.credentials_file);
}

std::string profile_label(const Profile& profile) {
  return "(profile " + quoted(profile.name) + ")";
}

// The profile settings that name a source this module cannot use yet; what each needs.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kUnbuiltSources{{
    {"role_arn", "assuming a role through STS"},
    {"credential_process", "running a credential process"},
    {"sso_session", "IAM Identity Center (SSO)"},
    {"sso_start_url", "IAM Identity Center (SSO)"},
    {"sso_role_name", "IAM Identity Center (SSO)"},
    {"web_identity_token_file", "web identity through STS"},
}};

std::variant<ResolvedCredentials, std::string> from_environment(const EnvLookup& env) {
  auto key_id = variable(env, "AWS_ACCESS_KEY_ID");
  auto secret = variable(env, "AWS_SECRET_ACCESS_KEY");
  if (!key_id && !secret) return std::string("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY unset");
  if (!secret) {
    throw CredentialsError(
        "aws: the environment has AWS_ACCESS_KEY_ID but no AWS_SECRET_ACCESS_KEY; set both, or "
        "neither to use the shared files");
  }
  if (!key_id) {
    throw CredentialsError(
        "aws: the environment has AWS_SECRET_ACCESS_KEY but no AWS_ACCESS_KEY_ID; set both, or "
        "neither to use the shared files");
  }
  ResolvedCredentials out;
  out.credentials.access_key_id = std::move(*key_id);
  out.credentials.secret_access_key = std::move(*secret);
  out.credentials.session_token = variable(env, "AWS_SESSION_TOKEN").value_or("");
  out.source = "environment";
  return out;
}

std::variant<ResolvedCredentials, std::string> from_shared_files(const EnvLookup& env) {
  Profile profile;
  load_profile(env, profile);
  if (!profile.found) {
    if (profile.explicit_name) {
      throw CredentialsError("aws: AWS_PROFILE names profile " + quoted(profile.name) +
                             ", which is not in " + profile.where);
    }
    return "no profile " + quoted(profile.name) + " in " + profile.where;
  }
  for (const auto& [property, needs] : kUnbuiltSources) {
    if (const auto it = profile.properties.find(std::string(property));
        it != profile.properties.end()) {
      throw CredentialsError("aws: profile " + quoted(profile.name) + " in the " +
                             describe(it->second.second->kind, it->second.second->path) + " sets " +
                             std::string(property) + " (" + std::string(needs) +
                             "), which outbox-relay cannot do yet; give the keys in the "
                             "environment or as aws_access_key_id and aws_secret_access_key");
    }
  }
  const auto key_id = profile.properties.find("aws_access_key_id");
  const auto secret = profile.properties.find("aws_secret_access_key");
  const bool has_key_id = key_id != profile.properties.end() && !key_id->second.first.empty();
  const bool has_secret = secret != profile.properties.end() && !secret->second.first.empty();
  if (!has_key_id && !has_secret) {
    return "profile " + quoted(profile.name) + " in " + profile.where +
           " has no aws_access_key_id or aws_secret_access_key";
  }
  if (!has_key_id || !has_secret) {
    const auto& present = has_key_id ? key_id->second : secret->second;
    throw CredentialsError("aws: profile " + quoted(profile.name) + " in the " +
                           describe(present.second->kind, present.second->path) + " has " +
                           (has_key_id ? "aws_access_key_id but no aws_secret_access_key"
                                       : "aws_secret_access_key but no aws_access_key_id"));
  }
  ResolvedCredentials out;
  out.credentials.access_key_id = key_id->second.first;
  out.credentials.secret_access_key = secret->second.first;
  if (const std::string* token = profile.value("aws_session_token")) {
    out.credentials.session_token = *token;
  }
  const ProfileFile* key_file = key_id->second.second;
  const ProfileFile* secret_file = secret->second.second;
  out.source = describe(key_file->kind, key_file->path);
  if (secret_file != key_file)
    out.source += " and " + describe(secret_file->kind, secret_file->path);
  out.source += " " + profile_label(profile);
  return out;
}

ResolvedCredentials resolve_chain(const EnvLookup& env, const std::vector<CredentialsSource>& chain,
                                  const std::string& hint) {
  std::string tried;
  for (const auto& provider : chain) {
    auto result = provider.resolve(env);
    if (auto* found = std::get_if<ResolvedCredentials>(&result)) return std::move(*found);
    if (!tried.empty()) tried += "; ";
    tried += provider.name + ": " + std::get<std::string>(result);
  }
  throw CredentialsError("aws: no credentials found (" + tried + hint + ")");
}

}  // namespace

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::string to_string(const ResolvedCredentials& resolved) {
  const std::string& key_id = resolved.credentials.access_key_id;
  // The key id's tail, as the AWS CLI shows it: enough to tell keys apart.
  const std::string shown = key_id.size() > 4 ? "..." + key_id.substr(key_id.size() - 4) : "****";
  return "access key id " + shown + " from " + resolved.source +
         (resolved.credentials.session_token.empty() ? ", no session token"
                                                     : ", with a session token");
}

CredentialsSource environment_provider() { return {"environment", from_environment}; }

CredentialsSource shared_files_provider() { return {"shared files", from_shared_files}; }

std::vector<CredentialsSource> default_credentials_chain() {
  // The HTTP sources come after these two: default_credentials_provider().
  return {environment_provider(), shared_files_provider()};
}

ResolvedCredentials resolve_credentials(const EnvLookup& env,
                                        const std::vector<CredentialsSource>& chain) {
  return resolve_chain(env, chain, "");
}

ResolvedCredentials resolve_credentials(const EnvLookup& env) {
  // The sources after these two, when the environment names them.
  std::string hint;
  for (const std::string_view name :
       {"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"}) {
    if (variable(env, name)) {
      hint += "; " + std::string(name) +
              " is set: default_credentials_provider() goes on to that source";
    }
  }
  return resolve_chain(env, default_credentials_chain(), hint);
}

std::optional<ResolvedRegion> resolve_region(const EnvLookup& env) {
  for (const std::string_view name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto region = variable(env, name)) {
      return ResolvedRegion{std::move(*region), "environment variable " + std::string(name)};
    }
  }
  Profile profile;
  load_profile(env, profile);
  const auto it = profile.properties.find("region");
  if (it == profile.properties.end() || it->second.first.empty()) return std::nullopt;
  return ResolvedRegion{
      it->second.first,
      describe(it->second.second->kind, it->second.second->path) + " " + profile_label(profile)};
}

}  // namespace outbox::aws
