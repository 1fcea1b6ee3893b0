// Validation of a node's record as the user types it: name, labels, key file path, price.
//
// Decision: one function checks a whole node and returns every problem at once, each naming its
// field, so the CLI prints them all and a dialog shows each beside its field (docs/reliability.md S7).
// Host, user and port use validate.h's allow-lists; a node name is stricter than a run id (it
// appears in commands the user copies: `flotilla nodes trust NAME ...`), and a key path is a local
// file path with no control bytes and no leading '-'.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flotilla::remote {

// A node as typed: every field still text, so a bad port can be reported as typed.
struct NodeFields {
  std::string name, host, port = "22", user, key_path, price_per_hour;  // price "": none
  std::vector<std::string> labels;
  bool spot = false;  // a spot (preemptible) instance; on-demand otherwise
};

struct FieldProblem {
  std::string field;    // "name", "host", "port", "user", "key", "price", "label"
  std::string message;  // one sentence starting with the field name
};

// Letters, digits, '.', '_', '-', at most 64, starting with a letter or digit.
std::string validate_node_name(std::string_view name);
// Letters, digits, '.', '_', '-', ':', '=', at most 64 (no ',' : labels are stored comma-joined).
std::string validate_label(std::string_view label);
// "" (none) or a path: no control bytes, no leading '-', at most 4096 bytes.
std::string validate_key_path(std::string_view path);
// "" (none) or a non-negative decimal number of dollars per hour.
std::string validate_price(std::string_view price);

// Every problem of the node (empty: valid). The user may be "" (the local user / ssh config).
std::vector<FieldProblem> validate_node_fields(const NodeFields& fields);

// The workspace's own known_hosts file: "known_hosts" beside the run database (absolute). The
// headless commands and the app both call this, so a key trusted in one is trusted in the other.
std::string workspace_known_hosts_path(const std::string& database_path);

}  // namespace flotilla::remote
