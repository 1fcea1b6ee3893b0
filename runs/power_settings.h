// The settings of a node's idle autostop as a user types them (the CLI's options, the Nodes page's
// dialog): an idle limit ("30m") and two commands as argument lists, checked by one set of rules.
//
// Decision: a command is a list of arguments, each kept verbatim (spaces, quotes, `;`, `$(...)` are
// plain characters of one argument); no placeholder is substituted. Each node carries its own
// commands, so a `{node}` placeholder would buy nothing and would make the argv depend on a value
// the user did not type in that field. Every problem is returned at once with the field it belongs
// to, in the words both front ends print.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace flotilla::runs {

inline constexpr double kMaxIdleLimitS = 30 * 86400.0;
inline constexpr size_t kMaxCommandArgs = 256;
inline constexpr size_t kMaxArgBytes = 4096;

struct PowerProblem {
  std::string field;    // "idle limit", "stop command", "start command"
  std::string message;  // "stop command: argument 3 holds a NUL byte"
};

// "30m", "90s", "2h", "1h30m", "1.5h" -> seconds; empty with `why` ("--idle needs a duration like
// 30m, 90s or 2h, got '30'") for anything else, a bare number included (minutes or seconds?).
std::optional<double> parse_idle_duration(const std::string& text, std::string* why);
// As typed, parse_idle_duration's inverse: "90s", "30m", "2h", "1h30m".
std::string idle_duration_input(double seconds);
// "45 s", "30 min", "2 h", "1 h 30 min".
std::string idle_duration_text(double seconds);

// An idle limit needs a stop command; the limit is > 0 and at most 30 days; a command's first
// argument (the program) is not empty; no argument holds a NUL byte or is longer than 4096 bytes; at
// most 256 arguments. A start command is optional (without one, a stopped node is started by hand).
std::vector<PowerProblem> validate_power_settings(std::optional<double> idle_limit_s,
                                                  const std::vector<std::string>& stop_argv,
                                                  const std::vector<std::string>& start_argv);

// The settings as a form holds them: the idle limit as typed ("" = autostop off) and both commands.
struct PowerFields {
  std::string idle;
  std::vector<std::string> stop_argv, start_argv;
};
// validate_power_settings after parsing `idle` (a bad duration is an "idle limit" problem); the
// parsed limit in `idle_limit_s` when given (empty for "").
std::vector<PowerProblem> validate_power_fields(const PowerFields& fields,
                                                std::optional<double>* idle_limit_s = nullptr);
// The form's fields of stored settings (idle "" when autostop is off).
PowerFields power_fields(std::optional<double> idle_limit_s, const std::vector<std::string>& stop_argv,
                         const std::vector<std::string>& start_argv);

// One argument per line (the dialog's text box) <-> a list; a trailing empty line is dropped, other
// empty lines are empty arguments.
std::vector<std::string> argv_from_lines(const std::string& text);
std::string argv_to_lines(const std::vector<std::string>& argv);

}  // namespace flotilla::runs
