// eval.tasks parsing and checks (see eval_tasks.h for the syntax decision).
#include "engine/config/eval_tasks.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <set>

#include "engine/config/config_schema.h"
#include "engine/core/error.h"

namespace flotilla {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

[[noreturn]] void bad(const std::string& entry, const std::string& why) {
  throw_config("eval.tasks: " + toml_quote(entry) + ": " + why);
}

int to_int(const std::string& entry, const std::string& key, const std::string& value, int lo) {
  int v = 0;
  const auto res = std::from_chars(value.data(), value.data() + value.size(), v);
  if (res.ec != std::errc() || res.ptr != value.data() + value.size())
    bad(entry, key + "=" + value + " is not a whole number");
  if (v < lo) bad(entry, key + "=" + value + " must be >= " + std::to_string(lo));
  return v;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

const char* const kKinds[] = {"multiple_choice", "perplexity", "generate"};

}  // namespace

std::string EvalTaskEntry::resolved_name() const {
  if (!name.empty()) return name;
  return std::filesystem::path(path).stem().string();
}

std::vector<EvalTaskEntry> parse_eval_tasks(const std::string& text) {
  std::vector<EvalTaskEntry> out;
  for (const std::string& raw : split(text, ';')) {
    const std::string entry = trim(raw);
    if (entry.empty()) continue;
    EvalTaskEntry t;
    std::string rest = entry;
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      const std::string head = rest.substr(0, colon);
      for (const char* k : kKinds)
        if (head == k) {
          t.kind = head;
          rest = rest.substr(colon + 1);
        }
    }
    const size_t q = rest.find('?');
    t.path = trim(rest.substr(0, q));
    if (t.path.empty()) bad(entry, "no task file (an entry is [kind:]path[?option=value&...])");
    if (q != std::string::npos) {
      for (const std::string& opt : split(rest.substr(q + 1), '&')) {
        if (trim(opt).empty()) continue;
        const size_t eq = opt.find('=');
        if (eq == std::string::npos) bad(entry, "option " + toml_quote(opt) + " has no '=' (option=value)");
        const std::string key = trim(opt.substr(0, eq)), value = trim(opt.substr(eq + 1));
        if (key == "name")
          t.name = value;
        else if (key == "dev")
          t.dev = value;
        else if (key == "fewshot")
          t.fewshot = to_int(entry, key, value, 0);
        else if (key == "limit")
          t.limit = to_int(entry, key, value, 0);
        else if (key == "stride")
          t.stride = to_int(entry, key, value, 0);
        else if (key == "regex")
          t.regex = value;
        else if (key == "max_tokens")
          t.max_tokens = to_int(entry, key, value, 1);
        else if (key == "batch")
          t.batch = to_int(entry, key, value, 1);
        else if (key == "kind") {
          bool known = false;
          for (const char* k : kKinds) known = known || value == k;
          if (!known) bad(entry, "kind=" + value + " is not multiple_choice, perplexity or generate");
          t.kind = value;
        } else {
          bad(entry, "unknown option " + toml_quote(key) +
                         " (name, kind, dev, fewshot, limit, stride, regex, max_tokens, batch)");
        }
      }
    }
    if (!valid_name(t.resolved_name()))
      bad(entry, "task name " + toml_quote(t.resolved_name()) +
                     " must be 1 to 64 letters, digits, '.', '_' or '-' (set one with ?name=...)");
    if (t.fewshot > 0 && t.dev.empty())
      bad(entry, "fewshot=" + std::to_string(t.fewshot) + " needs dev=FILE");
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> eval_task_problems(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> p;
  std::vector<EvalTaskEntry> tasks;
  try {
    tasks = parse_eval_tasks(c.eval.tasks);
  } catch (const Error& e) {
    std::string msg = e.what();
    const std::string prefix = "eval.tasks: ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg = msg.substr(prefix.size());
    p.push_back({"eval.tasks", msg});
    return p;
  }
  std::set<std::string> names;
  std::error_code ec;
  for (const EvalTaskEntry& t : tasks) {
    if (!names.insert(t.resolved_name()).second)
      p.push_back({"eval.tasks", "two tasks are named " + toml_quote(t.resolved_name()) +
                                     "; give one another name with ?name=..."});
    if (!std::filesystem::is_regular_file(t.path, ec))
      p.push_back({"eval.tasks", "task file " + toml_quote(t.path) + " does not exist or is not a file"});
    if (!t.dev.empty() && !std::filesystem::is_regular_file(t.dev, ec))
      p.push_back({"eval.tasks", "dev file " + toml_quote(t.dev) + " of task " +
                                     toml_quote(t.resolved_name()) + " does not exist or is not a file"});
  }
  if (c.eval.task_limit < 0)
    p.push_back({"eval.task_limit", std::to_string(c.eval.task_limit) + " must be >= 0 (0 = every example)"});
  if (!tasks.empty() && (c.parallel.tp > 1 || c.parallel.pp > 1))
    p.push_back({"eval.tasks",
                 "evaluation tasks run on whole-model replicas (split across data-parallel "
                 "ranks); parallel.tp=" +
                     std::to_string(c.parallel.tp) + " x parallel.pp=" + std::to_string(c.parallel.pp) +
                     " splits the model: clear eval.tasks and run `flotilla-worker eval "
                     "--checkpoint` on the saved checkpoints"});
  const std::string& kb = c.checkpoint.keep_best;
  if (kb != "auto" && kb != "none") {
    const auto parts = split(kb, '/');
    if (parts.size() != 3 || parts[0] != "task" || parts[2].empty())
      p.push_back({"checkpoint.keep_best", toml_quote(kb) + " is not auto, none or task/<task>/<score>"});
    else if (!names.count(parts[1]))
      p.push_back({"checkpoint.keep_best", toml_quote(kb) + " names task " + toml_quote(parts[1]) +
                                               ", which eval.tasks does not list"});
  }
  return p;
}

std::string keep_best_metric(const RunConfig& c, const std::string& auto_score) {
  const std::string& kb = c.checkpoint.keep_best;
  if (kb == "none") return "";
  if (kb != "auto") return kb;
  std::vector<EvalTaskEntry> tasks;
  try {
    tasks = parse_eval_tasks(c.eval.tasks);
  } catch (const Error&) {
    return "";
  }
  if (tasks.empty() || auto_score.empty()) return "";
  return "task/" + tasks.front().resolved_name() + "/" + auto_score;
}

}  // namespace flotilla
