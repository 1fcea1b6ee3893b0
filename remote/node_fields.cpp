// Node record validation (see node_fields.h).
#include "remote/node_fields.h"

#include <cstdlib>
#include <filesystem>

#include "remote/validate.h"

namespace flotilla::remote {
namespace {

bool is_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string shown(std::string_view v) {
  std::string out(1, '\'');
  out.append(printable(v));
  out.push_back('\'');
  return out;
}

std::string word_problem(const char* field, std::string_view v, std::string_view extra) {
  if (v.empty()) return std::string(field) + " is empty";
  if (v.size() > 64) return std::string(field) + " " + shown(v) + " is longer than 64 characters";
  if (!is_alnum(v.front()))
    return std::string(field) + " " + shown(v) + " must start with a letter or a digit";
  for (char c : v)
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-' && extra.find(c) == std::string_view::npos)
      return std::string(field) + " " + shown(v) + " may hold only letters, digits, '.', '_', '-'" +
             (extra.empty() ? "" : ", ':', '='");
  return "";
}

}  // namespace

std::string validate_node_name(std::string_view name) { return word_problem("name", name, ""); }

std::string validate_label(std::string_view label) { return word_problem("label", label, ":="); }

std::string validate_key_path(std::string_view path) {
  if (path.empty()) return "";
  if (path.size() > 4096) return "key path is longer than 4096 bytes";
  if (path.front() == '-') return "key path " + shown(path) + " must not start with '-'";
  for (char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "key path " + shown(path) + " contains a control character (a line break, tab or NUL)";
  return "";
}

std::string validate_price(std::string_view price) {
  if (price.empty()) return "";
  bool dot = false, digit = false;
  for (char c : price) {
    if (c == '.' && !dot) {
      dot = true;
    } else if (c >= '0' && c <= '9') {
      digit = true;
    } else {
      return "price " + shown(price) + " must be a non-negative number of dollars per hour, e.g. 2.50";
    }
  }
  if (!digit || price.size() > 12)
    return "price " + shown(price) + " must be a number of dollars per hour, e.g. 2.50";
  return "";
}

std::vector<FieldProblem> validate_node_fields(const NodeFields& f) {
  std::vector<FieldProblem> out;
  const auto add = [&](const char* field, std::string message) {
    if (!message.empty()) out.push_back({field, std::move(message)});
  };
  add("name", validate_node_name(f.name));
  add("host", validate_host(f.host));
  add("port", validate_port(f.port));
  if (!f.user.empty()) add("user", validate_user(f.user));
  add("key", validate_key_path(f.key_path));
  add("price", validate_price(f.price_per_hour));
  for (const auto& l : f.labels) add("label", validate_label(l));
  return out;
}

std::string workspace_known_hosts_path(const std::string& database_path) {
  const std::filesystem::path db = std::filesystem::absolute(database_path);
  return (db.parent_path() / "known_hosts").string();
}

}  // namespace flotilla::remote
