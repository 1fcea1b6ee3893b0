// Reading evaluation task files (docs/eval.md "Task files"): lines checked for UTF-8 and length
// before any JSON is parsed, then each JSONL object's fields checked by name, so every refusal names
// the file and the line.
//
// Decision: a line is read in 64 KiB pieces and refused the moment it passes 1 MiB, so a file with
// a 100 MB line (a binary file given by mistake, a dump without newlines) costs 1 MiB of memory and
// fails at once with its line number, instead of being slurped and handed to the JSON parser.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/eval/task_impl.h"

namespace flotilla::eval {
namespace {

// The byte offset of the first invalid UTF-8 sequence in s (overlong forms, surrogates and code
// points above U+10FFFF are invalid, as Python's decoder says), or npos.
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string::npos;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

const char* json_type(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::boolean:
      return "true/false";
    case nlohmann::json::value_t::null:
      return "null";
    default:
      return v.is_number() ? "a number" : "a value";
  }
}

nlohmann::json parse_object(const std::string& path, const Line& l) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(l.text);
  } catch (const nlohmann::json::exception& e) {
    throw_at(path, l.number, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw_at(path, l.number, std::string("expected a JSON object, found ") + json_type(j));
  return j;
}

std::string string_field(const std::string& path, const Line& l, const nlohmann::json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) throw_at(path, l.number, std::string("missing field \"") + name + "\"");
  if (!it->is_string())
    throw_at(path, l.number, std::string("field \"") + name + "\" must be a string, not " + json_type(*it));
  return it->get<std::string>();
}

// The lines holding an example: blank lines are skipped (a trailing newline, a separator).
std::vector<Line> example_lines(const std::string& path) {
  std::vector<Line> lines = read_lines(path), kept;
  for (Line& l : lines)
    if (l.text.find_first_not_of(" \t\r") != std::string::npos) kept.push_back(std::move(l));
  if (kept.empty()) throw_at(path, 1, "the file has no examples (it is empty)");
  return kept;
}

}  // namespace

void throw_at(const std::string& path, size_t line, const std::string& what) {
  throw Error(ExitCode::kData, path + ":" + std::to_string(line) + ": " + what);
}

std::vector<Line> read_lines(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(ExitCode::kData, path + ": cannot open the task file");
  std::vector<Line> out;
  Line cur;
  cur.number = 1;
  std::vector<char> buf(64 * 1024);
  bool any = false;
  auto finish = [&](bool at_newline) {
    if (!cur.text.empty() && cur.text.back() == '\r' && at_newline) cur.text.pop_back();
    const size_t bad = invalid_utf8_at(cur.text);
    if (bad != std::string::npos)
      throw_at(path, cur.number, "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line");
    out.push_back(std::move(cur));
    cur = Line{};
    cur.number = out.size() + 1;
  };
  for (;;) {
    const size_t got = std::fread(buf.data(), 1, buf.size(), f.get());
    if (got == 0) break;
    any = true;
    size_t start = 0;
    for (size_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') continue;
      cur.text.append(buf.data() + start, i - start);
      if (cur.text.size() > kMaxLineBytes + 1)  // + 1: the \r a CRLF line may end with
        throw_at(path, cur.number, "the line is over 1 MiB (" + std::to_string(kMaxLineBytes) + " bytes)");
      finish(true);
      start = i + 1;
    }
    cur.text.append(buf.data() + start, got - start);
    if (cur.text.size() > kMaxLineBytes + 1)
      throw_at(path, cur.number, "the line is over 1 MiB (" + std::to_string(kMaxLineBytes) + " bytes)");
  }
  if (std::ferror(f.get())) throw Error(ExitCode::kIo, path + ": read failed");
  if (!cur.text.empty()) finish(false);
  if (!any) throw_at(path, 1, "the file is empty");
  return out;
}

std::string read_text(const std::string& path) {
  // Lines are re-joined with "\n": the text as written, except that CRLF ends become LF.
  std::string text;
  const std::vector<Line> lines = read_lines(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) text += '\n';
    text += lines[i].text;
  }
  // A final newline is kept when the file had one (read_lines drops the empty last piece).
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (f && std::fseek(f.get(), -1, SEEK_END) == 0 && std::fgetc(f.get()) == '\n') text += '\n';
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw_at(path, 1, "the file has no text");
  return text;
}

std::vector<McRecord> read_multiple_choice(const std::string& path) {
  std::vector<McRecord> out;
  for (const Line& l : example_lines(path)) {
    const nlohmann::json j = parse_object(path, l);
    McRecord r;
    r.line = l.number;
    r.context = string_field(path, l, j, "context");
    const auto ch = j.find("choices");
    if (ch == j.end()) throw_at(path, l.number, "missing field \"choices\"");
    if (!ch->is_array())
      throw_at(path, l.number,
               std::string("field \"choices\" must be a list of strings, not ") + json_type(*ch));
    if (ch->size() < 2)
      throw_at(path, l.number,
               "field \"choices\" needs at least 2 choices, it has " + std::to_string(ch->size()));
    for (size_t k = 0; k < ch->size(); ++k) {
      if (!(*ch)[k].is_string())
        throw_at(path, l.number,
                 "choice " + std::to_string(k) + " must be a string, not " + json_type((*ch)[k]));
      r.choices.push_back((*ch)[k].get<std::string>());
      if (r.choices.back().empty()) throw_at(path, l.number, "choice " + std::to_string(k) + " is empty");
    }
    const auto a = j.find("answer");
    if (a == j.end()) throw_at(path, l.number, "missing field \"answer\"");
    if (!a->is_number_integer())
      throw_at(path, l.number,
               std::string("field \"answer\" must be an integer (the index of the right choice), not ") +
                   json_type(*a));
    const auto v = a->get<int64_t>();
    if (v < 0 || v >= static_cast<int64_t>(r.choices.size()))
      throw_at(path, l.number,
               "answer " + std::to_string(v) + " is out of range: there are " +
                   std::to_string(r.choices.size()) + " choices (0.." + std::to_string(r.choices.size() - 1) +
                   ")");
    r.answer = static_cast<int>(v);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<GenRecord> read_generate(const std::string& path) {
  std::vector<GenRecord> out;
  for (const Line& l : example_lines(path)) {
    const nlohmann::json j = parse_object(path, l);
    GenRecord r;
    r.line = l.number;
    r.question = string_field(path, l, j, "question");
    r.answer = string_field(path, l, j, "answer");
    if (r.question.empty()) throw_at(path, l.number, "field \"question\" is empty");
    out.push_back(std::move(r));
  }
  return out;
}

TaskKind detect_task_kind(const std::string& path) {
  // Only the first non-blank line is looked at (read in full by load_task later, with its checks).
  // A line that starts like JSON must be a task's JSON: a JSONL file with a typo on its first line
  // is refused, not silently scored as a text.
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(ExitCode::kData, path + ": cannot open the task file");
  std::string line;
  size_t number = 1;
  int c = 0;
  bool any = false;
  while ((c = std::fgetc(f.get())) != EOF) {
    any = true;
    if (c == '\n') {
      if (line.find_first_not_of(" \t\r") != std::string::npos) break;
      line.clear();
      ++number;
      continue;
    }
    if (line.size() > kMaxLineBytes) return TaskKind::kPerplexity;  // load_task refuses the line
    line += static_cast<char>(c);
  }
  if (!any) throw_at(path, 1, "the file is empty");
  const size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string::npos || line[first] != '{') return TaskKind::kPerplexity;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object())
    throw_at(path, number,
             "not valid JSON (a JSONL task file has one JSON object a line; a text for perplexity: --kind "
             "perplexity)");
  if (j.contains("choices")) return TaskKind::kMultipleChoice;
  if (j.contains("question") && j.contains("answer")) return TaskKind::kGenerate;
  throw_at(
      path, number,
      "a JSON object with neither \"choices\" (multiple choice) nor \"question\" and \"answer\" (generate); "
      "a text for perplexity: --kind perplexity");
}

}  // namespace flotilla::eval
