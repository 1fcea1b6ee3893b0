// The inside of a loaded evaluation task (engine/eval/task.h), shared by the file reader
// (task_file.cpp) and the runner (task.cpp). Not for use outside engine/eval/.
//
// Decision: everything a run needs is tokenized at load time and kept here (token ids, the bytes of
// each vocabulary id for decoding generations), so run_units needs only the model: the trainer can
// hold a Task for the whole run and any rank can run any units of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/eval/task.h"
#include "engine/infer/score.h"

namespace flotilla::eval {

// One example of a JSONL task file, as read (text fields checked, not yet tokenized).
struct McRecord {
  size_t line = 0;
  std::string context;
  std::vector<std::string> choices;
  int answer = 0;
};
struct GenRecord {
  size_t line = 0;
  std::string question;
  std::string answer;
};

// Reads a file's lines, each checked: valid UTF-8, at most kMaxLineBytes (a longer line is refused
// as soon as it passes the limit, never read whole into memory). Throws Error(kData) "FILE:LINE: ...".
inline constexpr size_t kMaxLineBytes = 1u << 20;
struct Line {
  size_t number = 0;  // 1-based
  std::string text;   // without its newline (and a \r before it)
};
std::vector<Line> read_lines(const std::string& path);
// The whole file as text (each line checked as above; the newlines kept).
std::string read_text(const std::string& path);

std::vector<McRecord> read_multiple_choice(const std::string& path);
std::vector<GenRecord> read_generate(const std::string& path);

// "FILE:LINE: what" as an Error(kData).
[[noreturn]] void throw_at(const std::string& path, size_t line, const std::string& what);

// A multiple-choice example: one score request per choice (lm-evaluation-harness's context and
// continuation tokens), the choice's length in characters (Python's len, for acc_norm).
struct McExample {
  std::vector<infer::ScoreRequest> requests;
  std::vector<double> choice_chars;
  int answer = 0;
};
struct PplWindow {
  infer::ScoreRequest request;
  double bytes = 0;  // UTF-8 bytes of the scored tokens
};
struct GenExample {
  std::vector<int32_t> prompt;
  std::string reference;  // the reference's answer (extracted by the regex at load time)
};

}  // namespace flotilla::eval

namespace flotilla::eval {

struct Task {
  TaskSpec spec;
  int max_seq_len = 0;
  std::vector<McExample> mc;
  std::vector<PplWindow> windows;
  std::vector<GenExample> gen;
  // Generation: the bytes of every id (special tokens: "" so they never reach the answer), the ids
  // that end a row, and the compiled answer regex (opaque pcre2_code*).
  std::vector<std::string> token_bytes;
  std::vector<int32_t> stop_ids;
  std::shared_ptr<void> regex;
};

// The answer the regex finds in text ("" when none), normalised for comparison (task.cpp).
std::string extract_answer(const Task& t, const std::string& text);

}  // namespace flotilla::eval
