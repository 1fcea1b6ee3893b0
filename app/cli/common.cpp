// Context, store opening and formatting for the headless commands (see cli.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/costs.h"
#include "db/queries.h"
#include "db/workspace.h"
#include "db/writer.h"
#include "runs/figures.h"
#include "runs/run_status.h"
#include "runs/stale_runs.h"

namespace flotilla::cli {

std::string database_path(const Context& ctx) {
  if (!ctx.db_path.empty()) return std::filesystem::absolute(ctx.db_path).lexically_normal().string();
  std::string dir = ctx.workspace.empty()
                        ? db::default_workspace_dir()
                        : std::filesystem::absolute(ctx.workspace).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return db::workspace_database_path(dir);
}

db::Database open_store(const Context& ctx, const std::string& origin) {
  const std::string path = database_path(ctx);
  if (ctx.db_path.empty()) db::ensure_workspace_dir(std::filesystem::path(path).parent_path().string());
  db::Database db(path);
  db::ensure_pricing_seeded(db);
  if (db::any_run_in(db, {db::RunStatus::kRunning, db::RunStatus::kCreated})) {
    db::Writer writer(path);
    const std::string who = origin != "flotilla" || ctx.command.empty() ? origin : "flotilla " + ctx.command;
    for (const runs::SettledRun& s : runs::settle_stale_local_runs(writer, who)) {
      if (s.removed)
        std::fprintf(stderr, "flotilla: run %s was removed: %s\n", s.name.c_str(), s.note.c_str());
      else
        std::fprintf(stderr, "flotilla: run %s had no live worker left: recorded %s from its files\n",
                     s.name.c_str(), runs::status_text(s.status, s.note).c_str());
    }
  }
  return db;
}

bool looks_like_option(const std::string& arg) {
  const auto digit = [&](size_t i) {
    return i < arg.size() && std::isdigit(static_cast<unsigned char>(arg[i]));
  };
  return arg.size() > 1 && arg[0] == '-' && !digit(1) && !(arg[1] == '.' && digit(2));
}

ArgReader::ArgReader(std::vector<std::string> args, std::string command)
    : args_(std::move(args)), used_(args_.size(), false), command_(std::move(command)) {
  end_ = static_cast<size_t>(std::find(args_.begin(), args_.end(), "--") - args_.begin());
}

bool ArgReader::flag(const std::string& name) {
  bool found = false;
  for (size_t i = 0; i < end_; ++i)
    if (!used_[i] && args_[i] == name) used_[i] = found = true;
  return found;
}

std::vector<std::string> ArgReader::values(const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < end_; ++i) {
    if (used_[i]) continue;
    if (args_[i] == name) {
      if (i + 1 >= end_) throw UsageError(command_ + ": " + name + " needs a value");
      if (used_[i + 1] || looks_like_option(args_[i + 1]))
        throw UsageError(command_ + ": " + name + " needs a value, but is followed by the option '" +
                         args_[i + 1] + "' (a value that starts with '-' is written " + name + "=VALUE)");
      used_[i] = used_[i + 1] = true;
      out.push_back(args_[i + 1]);
      ++i;
    } else if (args_[i].rfind(name + "=", 0) == 0) {
      used_[i] = true;
      out.push_back(args_[i].substr(name.size() + 1));
    }
  }
  return out;
}

std::optional<std::string> ArgReader::value(const std::string& name) {
  const auto v = values(name);
  if (v.size() > 1) throw UsageError(command_ + ": " + name + " given more than once");
  if (v.empty()) return std::nullopt;
  return v[0];
}

std::optional<double> ArgReader::number(const std::string& name) {
  const auto v = value(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(d))
    throw UsageError(command_ + ": " + name + " needs a number, got '" + *v + "'");
  return d;
}

std::vector<std::string> ArgReader::positionals() {
  std::vector<std::string> out;
  for (size_t i = 0; i < end_; ++i) {
    if (used_[i]) continue;
    if (looks_like_option(args_[i])) throw UsageError(command_ + ": unknown option '" + args_[i] + "'");
    out.push_back(args_[i]);
  }
  for (size_t i = end_ + 1; i < args_.size(); ++i) out.push_back(args_[i]);
  return out;
}

std::string format_time(double t) {
  if (t <= 0) return "-";
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string format_duration(double seconds) {
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  } else if (seconds < 3600) {
    const int s = static_cast<int>(seconds);
    std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  } else {
    const int m = static_cast<int>(seconds / 60);
    std::snprintf(buf, sizeof buf, "%dh%02dm", m / 60, m % 60);
  }
  return buf;
}

std::string format_usd(double usd) { return runs::usd_text(usd); }

std::string format_number(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (a >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

double parse_deadline(const std::string& text, double now) {
  const auto bad = [&] {
    return UsageError("--deadline '" + text +
                      "' is not a time: use \"2026-12-08 18:00\", 2026-12-08T18:00 (ISO, Z for UTC), +3h / "
                      "+90m / +2d, or unix seconds");
  };
  {
    char* end = nullptr;  // unix seconds
    const double v = std::strtod(text.c_str(), &end);
    if (!text.empty() && text[0] != '+' && end && *end == '\0' && v > 0 && std::isfinite(v)) return v;
  }
  if (!text.empty() && text[0] == '+') {
    char* end = nullptr;
    const double v = std::strtod(text.c_str() + 1, &end);
    if (end == text.c_str() + 1 || !(v > 0) || !std::isfinite(v)) throw bad();
    const std::string unit = end;
    const double mult = unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
    if (mult < 0) throw bad();
    return now + v * mult;
  }
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char sep = 0;
  int used = 0;
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d%n", &y, &mo, &d, &sep, &h, &mi, &used);
  if (n < 6 || (sep != ' ' && sep != 'T')) throw bad();
  std::string rest = text.substr(static_cast<size_t>(used));
  if (!rest.empty() && rest[0] == ':') {
    int used2 = 0;
    if (std::sscanf(rest.c_str(), ":%2d%n", &s, &used2) != 1) throw bad();
    rest = rest.substr(static_cast<size_t>(used2));
  }
  const bool utc = rest == "Z";
  if (!rest.empty() && !utc) throw bad();
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) throw bad();
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  tm.tm_isdst = -1;
  const std::time_t t = utc ? ::timegm(&tm) : std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) throw bad();
  return static_cast<double>(t);
}

}  // namespace flotilla::cli
