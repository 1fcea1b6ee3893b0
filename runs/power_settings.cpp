// Idle autostop settings as typed (see power_settings.h).
#include "runs/power_settings.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flotilla::runs {

std::optional<double> parse_idle_duration(const std::string& text, std::string* why) {
  const auto fail = [&]() -> std::optional<double> {
    if (why) *why = "needs a duration like 30m, 90s or 2h, got '" + text + "'";
    return std::nullopt;
  };
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    const size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == start || i == text.size()) return fail();  // no number, or a number without a unit
    const std::string num = text.substr(start, i - start);
    char* end = nullptr;
    const double v = std::strtod(num.c_str(), &end);
    if (*end != '\0' || !std::isfinite(v)) return fail();
    double unit = 0;
    if (text.compare(i, 3, "min") == 0) {
      unit = 60;
      i += 3;
    } else {
      switch (text[i]) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = 60;
          break;
        case 'h':
          unit = 3600;
          break;
        case 'd':
          unit = 86400;
          break;
        default:
          return fail();
      }
      ++i;
    }
    total += v * unit;
    any = true;
  }
  if (!any) return fail();
  return total;
}

std::string idle_duration_input(double s) {
  char buf[64];
  const double r = std::round(s);
  if (std::fabs(s - r) > 1e-9 || std::fmod(r, 60) != 0) {
    std::snprintf(buf, sizeof buf, "%gs", s);
    return buf;
  }
  const long long m = std::llround(r / 60);
  if (m % 60 == 0)
    std::snprintf(buf, sizeof buf, "%lldh", m / 60);
  else if (m > 60)
    std::snprintf(buf, sizeof buf, "%lldh%lldm", m / 60, m % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldm", m);
  return buf;
}

std::string idle_duration_text(double s) {
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%g s", std::round(s * 10) / 10);
    return buf;
  }
  const long long m = std::llround(s / 60);
  if (m < 60) {
    std::snprintf(buf, sizeof buf, "%lld min", m);
  } else if (m % 60 == 0) {
    std::snprintf(buf, sizeof buf, "%lld h", m / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld h %lld min", m / 60, m % 60);
  }
  return buf;
}

namespace {

void check_argv(const std::string& field, const std::vector<std::string>& argv,
                std::vector<PowerProblem>& out) {
  if (argv.empty()) return;
  if (argv[0].empty()) out.push_back({field, field + ": the first argument (the program to run) is empty"});
  if (argv.size() > kMaxCommandArgs)
    out.push_back({field, field + ": " + std::to_string(argv.size()) + " arguments, at most " +
                              std::to_string(kMaxCommandArgs)});
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string n = std::to_string(i + 1);
    if (argv[i].find('\0') != std::string::npos)
      out.push_back({field, field + ": argument " + n + " holds a NUL byte"});
    if (argv[i].size() > kMaxArgBytes)
      out.push_back(
          {field, field + ": argument " + n + " is longer than " + std::to_string(kMaxArgBytes) + " bytes"});
  }
}

}  // namespace

std::vector<PowerProblem> validate_power_settings(std::optional<double> idle_limit_s,
                                                  const std::vector<std::string>& stop_argv,
                                                  const std::vector<std::string>& start_argv) {
  std::vector<PowerProblem> out;
  if (idle_limit_s) {
    if (!std::isfinite(*idle_limit_s) || *idle_limit_s <= 0 || *idle_limit_s > kMaxIdleLimitS)
      out.push_back({"idle limit", "idle limit: must be more than 0 and at most 30 days"});
    if (stop_argv.empty())
      out.push_back({"stop command", "stop command: an idle limit needs a command that stops the node"});
  }
  check_argv("stop command", stop_argv, out);
  check_argv("start command", start_argv, out);
  return out;
}

std::vector<PowerProblem> validate_power_fields(const PowerFields& f, std::optional<double>* idle_limit_s) {
  std::optional<double> limit;
  std::vector<PowerProblem> out;
  if (!f.idle.empty()) {
    std::string why;
    limit = parse_idle_duration(f.idle, &why);
    if (!limit) out.push_back({"idle limit", "idle limit: " + why});
  }
  // An unparsed limit still needs a stop command: check as if it were set.
  auto rest = validate_power_settings(
      limit ? limit : (f.idle.empty() ? std::nullopt : std::optional<double>(1)), f.stop_argv, f.start_argv);
  out.insert(out.end(), rest.begin(), rest.end());
  if (idle_limit_s) *idle_limit_s = limit;
  return out;
}

PowerFields power_fields(std::optional<double> idle_limit_s, const std::vector<std::string>& stop_argv,
                         const std::vector<std::string>& start_argv) {
  return {idle_limit_s ? idle_duration_input(*idle_limit_s) : "", stop_argv, start_argv};
}

std::vector<std::string> argv_from_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
    start = nl + 1;
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string argv_to_lines(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) out += (i ? "\n" : "") + argv[i];
  return out;
}

}  // namespace flotilla::runs
