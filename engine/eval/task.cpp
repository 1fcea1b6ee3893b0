// Evaluation tasks (see task.h; formats and semantics in docs/eval.md).
//
// Multiple choice follows lm-evaluation-harness (EleutherAI, lm_eval/api/model.py _encode_pair,
// api/task.py process_results) to the letter, so a score here is the score people quote:
//  - the prompt is the few-shot examples, each "context" + " " + its right choice + "\n\n", then the
//    example's context; each choice is the continuation " " + choice;
//  - the context's trailing whitespace (Python's str.rstrip) moves to the front of the continuation;
//    context + continuation is tokenized whole (as transformers' tokenizer(text): a Llama 3 BOS
//    first), the context alone, and the continuation is whole[len(context tokens):];
//  - an empty context is the BOS (else EOS) token, the continuation tokenized without it;
//  - the sequence is cut from the left to the model's context + 1;
//  - acc: argmax of the summed log-probs; acc_norm: argmax of the sum / len(choice) in characters
//    (Python's len, the choice without the delimiter); ties go to the first; stderr: the sample
//    standard deviation (n - 1) over sqrt(n).
// Decision: each example's choices are one forward (its rows padded to the longest) whatever the
// range asked for, so an example's log-likelihoods, hence the scores, do not depend on how ranks
// split the units. Perplexity windows run one per forward for the same reason.
#include "engine/eval/task.h"

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/data/chat_format.h"
#include "engine/eval/task_impl.h"
#include "engine/infer/generate.h"
#include "engine/tokenizer/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace flotilla::eval {
namespace {

constexpr const char* kDefaultRegex = R"(#### (\-?[0-9.,]+))";
constexpr const char* kGenStop = "\n\n";

std::vector<int32_t> to_i32(const std::vector<uint32_t>& v) { return {v.begin(), v.end()}; }

// transformers' tokenizer(text): special tokens in the text matched, the post-processor's tokens
// (Llama 3's BOS) around it. lm-evaluation-harness's tok_encode with its defaults.
std::vector<int32_t> model_input(const Tokenizer& tok, const std::string& text) {
  return to_i32(tok.encode_model_input(text));
}

// The bytes of trailing whitespace, as Python's str.rstrip() sees whitespace (str.isspace).
size_t trailing_space_bytes(const std::string& s) {
  size_t end = s.size();
  for (;;) {
    if (end == 0) break;
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    uint32_t cp = 0;
    const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + start;
    const size_t len = end - start;
    if (len == 1)
      cp = p[0];
    else if (len == 2)
      cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    else if (len == 3)
      cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    else
      cp = 0xFFFFFFFF;
    const bool space = (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
                       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
                       cp == 0x202F || cp == 0x205F || cp == 0x3000;
    if (!space) break;
    end = start;
  }
  return s.size() - end;
}

double code_points(const std::string& s) {
  double n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

void check_name(const std::string& name, const std::string& what) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
  if (!ok)
    throw_usage(what + " '" + name + "' cannot name a task: use 1 to 64 of A-Z a-z 0-9 . _ - (give a name)");
}

// lm-evaluation-harness's loglikelihood request for (context, continuation), cut to the context.
infer::ScoreRequest mc_request(const Tokenizer& tok, std::string context, std::string continuation,
                               int max_seq_len, const std::string& path, size_t line) {
  std::vector<int32_t> ctx, cont;
  if (context.empty()) {
    cont = to_i32(tok.encode(continuation, true));
    const auto prefix = static_cast<int32_t>(tok.bos_id().value_or(tok.eos_id().value_or(tok.eot_id())));
    if (!cont.empty() && cont[0] == prefix) {
      ctx.assign(cont.begin(), cont.begin() + 1);
      cont.erase(cont.begin());
    } else {
      ctx = {prefix};
    }
  } else {
    const size_t n_spaces = trailing_space_bytes(context);
    if (n_spaces > 0) {
      continuation = context.substr(context.size() - n_spaces) + continuation;
      context.resize(context.size() - n_spaces);
    }
    const std::vector<int32_t> whole = model_input(tok, context + continuation);
    ctx = model_input(tok, context);
    if (ctx.size() <= whole.size())
      cont.assign(whole.begin() + static_cast<std::ptrdiff_t>(ctx.size()), whole.end());
  }
  if (cont.empty()) throw_at(path, line, "a choice tokenizes to nothing after its context");
  if (cont.size() > static_cast<size_t>(max_seq_len))
    throw_at(path, line,
             "a choice is " + std::to_string(cont.size()) + " tokens, more than the model's context of " +
                 std::to_string(max_seq_len));
  std::vector<int32_t> all = ctx;
  all.insert(all.end(), cont.begin(), cont.end());
  const size_t keep = std::min(all.size(), static_cast<size_t>(max_seq_len) + 1);
  infer::ScoreRequest r;
  r.ids.assign(all.end() - static_cast<std::ptrdiff_t>(keep), all.end());
  r.first = r.ids.size() - cont.size();
  return r;
}

// Comparison form of an extracted answer: GSM8K's regexes_to_ignore (",", "$", a final ".") and
// ignore_case, surrounding whitespace trimmed.
std::string normalise(std::string s) {
  std::string t;
  for (char c : s)
    if (c != ',' && c != '$') t += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  const size_t b = t.find_first_not_of(" \t\r\n"), e = t.find_last_not_of(" \t\r\n");
  t = b == std::string::npos ? "" : t.substr(b, e - b + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

// The regex's first match in text: its first group when it has one (else the whole match).
bool regex_find(const Task& t, const std::string& text, std::string* out) {
  auto* code = static_cast<pcre2_code*>(t.regex.get());
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, nullptr);
  bool found = false;
  if (rc > 0) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const int group = rc > 1 && ov[2] != PCRE2_UNSET ? 1 : 0;
    *out = text.substr(ov[2 * group], ov[2 * group + 1] - ov[2 * group]);
    found = true;
  }
  pcre2_match_data_free(md);
  return found;
}

void load_multiple_choice(Task& t, const Tokenizer& tok) {
  const TaskSpec& s = t.spec;
  std::string fewshot;
  if (s.fewshot > 0) {
    const std::vector<McRecord> dev = read_multiple_choice(s.dev_path);
    if (static_cast<size_t>(s.fewshot) > dev.size())
      throw_usage("--fewshot " + std::to_string(s.fewshot) + ": " + s.dev_path + " has only " +
                  std::to_string(dev.size()) + " examples");
    for (int k = 0; k < s.fewshot; ++k)
      fewshot +=
          dev[static_cast<size_t>(k)].context + " " +
          dev[static_cast<size_t>(k)].choices[static_cast<size_t>(dev[static_cast<size_t>(k)].answer)] +
          "\n\n";
  }
  std::vector<McRecord> recs = read_multiple_choice(s.path);
  if (s.limit > 0 && recs.size() > static_cast<size_t>(s.limit)) recs.resize(static_cast<size_t>(s.limit));
  for (const McRecord& r : recs) {
    McExample e;
    e.answer = r.answer;
    for (const std::string& c : r.choices) {
      e.requests.push_back(mc_request(tok, fewshot + r.context, " " + c, t.max_seq_len, s.path, r.line));
      e.choice_chars.push_back(code_points(c));
    }
    t.mc.push_back(std::move(e));
  }
}

// transformers' documented sliding-window perplexity (docs "Perplexity of fixed-length models"):
// windows of the model's context starting every `stride` tokens; each scores only the tokens no
// earlier window scored (the first token of the text is never scored: nothing predicts it).
void load_perplexity(Task& t, const Tokenizer& tok) {
  const TaskSpec& s = t.spec;
  const std::string text = read_text(s.path);
  const std::vector<int32_t> ids = model_input(tok, text);
  const size_t n = ids.size(), L = static_cast<size_t>(t.max_seq_len);
  if (n < 2) throw_at(s.path, 1, "the text is " + std::to_string(n) + " token: perplexity needs at least 2");
  const size_t stride = s.stride > 0 ? static_cast<size_t>(s.stride) : std::max<size_t>(1, L / 2);
  if (stride > L)
    throw_usage("--stride " + std::to_string(stride) + " is more than the model's context of " +
                std::to_string(L));
  size_t prev_end = 0;
  for (size_t begin = 0; begin < n; begin += stride) {
    const size_t end = std::min(begin + L, n), trg = end - prev_end, len = end - begin;
    if (len >= 2) {
      PplWindow w;
      w.request.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                           ids.begin() + static_cast<std::ptrdiff_t>(end));
      w.request.first = std::max<size_t>(1, len - std::min(trg, len));
      for (size_t i = w.request.first; i < len; ++i) {
        const auto id = static_cast<uint32_t>(w.request.ids[i]);
        if (!tok.is_special(id)) w.bytes += static_cast<double>(tok.token_bytes(id).size());
      }
      t.windows.push_back(std::move(w));
      if (s.limit > 0 && t.windows.size() >= static_cast<size_t>(s.limit)) break;
    }
    prev_end = end;
    if (end == n) break;
  }
}

void load_generate(Task& t, const Tokenizer& tok) {
  const TaskSpec& s = t.spec;
  const std::string pattern = s.answer_regex.empty() ? kDefaultRegex : s.answer_regex;
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw_usage("--regex '" + pattern + "': " + reinterpret_cast<const char*>(msg) + " at offset " +
                std::to_string(off));
  }
  t.regex = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
  if (s.max_tokens < 1) throw_usage("max_tokens must be at least 1");
  std::string fewshot;
  if (s.fewshot > 0) {
    const std::vector<GenRecord> dev = read_generate(s.dev_path);
    if (static_cast<size_t>(s.fewshot) > dev.size())
      throw_usage("--fewshot " + std::to_string(s.fewshot) + ": " + s.dev_path + " has only " +
                  std::to_string(dev.size()) + " examples");
    for (int k = 0; k < s.fewshot; ++k)
      fewshot += "Question: " + dev[static_cast<size_t>(k)].question +
                 "\nAnswer: " + dev[static_cast<size_t>(k)].answer + "\n\n";
  }
  const int vocab = tok.vocab_size();
  t.token_bytes.resize(static_cast<size_t>(vocab));
  for (int id = 0; id < vocab; ++id)
    if (!tok.is_special(static_cast<uint32_t>(id)))
      t.token_bytes[static_cast<size_t>(id)] = tok.token_bytes(static_cast<uint32_t>(id));
  t.stop_ids = to_i32(stop_token_ids(tok, std::nullopt));
  std::vector<GenRecord> recs = read_generate(s.path);
  if (s.limit > 0 && recs.size() > static_cast<size_t>(s.limit)) recs.resize(static_cast<size_t>(s.limit));
  // The prompt keeps room for the answer: its last (context - max_tokens) tokens, at least half the
  // context (lm-evaluation-harness cuts to max_length - max_gen_toks).
  const size_t L = static_cast<size_t>(t.max_seq_len);
  const size_t keep = std::max<size_t>(
      1, std::max(L / 2, L > static_cast<size_t>(s.max_tokens) ? L - static_cast<size_t>(s.max_tokens) : 0));
  for (const GenRecord& r : recs) {
    GenExample e;
    e.prompt = model_input(tok, fewshot + "Question: " + r.question + "\nAnswer:");
    if (e.prompt.size() > keep)
      e.prompt.erase(e.prompt.begin(), e.prompt.end() - static_cast<std::ptrdiff_t>(keep));
    std::string ref;
    e.reference = normalise(regex_find(t, r.answer, &ref) ? ref : r.answer);
    t.gen.push_back(std::move(e));
  }
}

}  // namespace

void TaskDeleter::operator()(Task* t) const { delete t; }

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kMultipleChoice:
      return "multiple_choice";
    case TaskKind::kPerplexity:
      return "perplexity";
    case TaskKind::kGenerate:
      return "generate";
  }
  return "?";
}

bool parse_task_kind(const std::string& s, TaskKind* out) {
  for (TaskKind k : {TaskKind::kMultipleChoice, TaskKind::kPerplexity, TaskKind::kGenerate})
    if (s == task_kind_name(k)) {
      *out = k;
      return true;
    }
  return false;
}

std::string extract_answer(const Task& t, const std::string& text) {
  std::string found;
  return regex_find(t, text, &found) ? normalise(found) : std::string();
}

TaskPtr load_task(const TaskSpec& spec, const Tokenizer& tokenizer, int max_seq_len) {
  TaskPtr t(new Task);
  t->spec = spec;
  t->max_seq_len = max_seq_len;
  if (spec.name.empty()) {
    t->spec.name = std::filesystem::path(spec.path).stem().string();
    check_name(t->spec.name, "the file name");
  } else {
    check_name(spec.name, "the name");
  }
  if (max_seq_len < 2) throw_usage("the model's context must be at least 2 tokens");
  if (spec.limit < 0) throw_usage("limit must be 0 (all) or more");
  if (spec.stride < 0) throw_usage("stride must be 0 (half the context) or more");
  if (spec.fewshot < 0) throw_usage("fewshot must be 0 or more");
  if (spec.fewshot > 0 && spec.kind == TaskKind::kPerplexity)
    throw_usage("a perplexity task takes no few-shot examples");
  if (spec.fewshot > 0 && spec.dev_path.empty())
    throw_usage("few-shot examples come from a dev file: give one (--dev FILE) with --fewshot");
  switch (spec.kind) {
    case TaskKind::kMultipleChoice:
      load_multiple_choice(*t, tokenizer);
      break;
    case TaskKind::kPerplexity:
      load_perplexity(*t, tokenizer);
      break;
    case TaskKind::kGenerate:
      load_generate(*t, tokenizer);
      break;
  }
  return t;
}

const TaskSpec& task_spec(const Task& t) { return t.spec; }

size_t task_units(const Task& t) {
  switch (t.spec.kind) {
    case TaskKind::kMultipleChoice:
      return t.mc.size();
    case TaskKind::kPerplexity:
      return t.windows.size();
    case TaskKind::kGenerate:
      return t.gen.size();
  }
  return 0;
}

Partial run_units(Model& model, const Task& t, size_t begin, size_t end) {
  end = std::min(end, task_units(t));
  if (model.dims().max_seq_len < t.max_seq_len)
    throw_usage("the task was loaded for a context of " + std::to_string(t.max_seq_len) +
                " tokens, the model has " + std::to_string(model.dims().max_seq_len));
  Partial p;
  switch (t.spec.kind) {
    case TaskKind::kMultipleChoice: {
      p.sums.assign(3, 0.0);  // n, acc, acc_norm
      for (size_t u = begin; u < end; ++u) {
        const McExample& e = t.mc[u];
        const auto s = infer::score(model, e.requests, static_cast<int>(e.requests.size()));
        size_t best = 0, best_norm = 0;
        double top = -INFINITY, top_norm = -INFINITY;
        for (size_t k = 0; k < s.size(); ++k) {
          const double ll = s[k].sum(), norm = ll / e.choice_chars[k];
          if (ll > top) top = ll, best = k;  // strict: ties keep the first (numpy argmax)
          if (norm > top_norm) top_norm = norm, best_norm = k;
        }
        p.sums[0] += 1;
        p.sums[1] += best == static_cast<size_t>(e.answer) ? 1 : 0;
        p.sums[2] += best_norm == static_cast<size_t>(e.answer) ? 1 : 0;
      }
      break;
    }
    case TaskKind::kPerplexity: {
      p.sums.assign(4, 0.0);  // windows, nll, tokens, bytes
      for (size_t u = begin; u < end; ++u) {
        const PplWindow& w = t.windows[u];
        const auto s = infer::score(model, {w.request}, 1);
        p.sums[0] += 1;
        p.sums[1] -= s[0].sum();
        p.sums[2] += static_cast<double>(s[0].logprob.size());
        p.sums[3] += w.bytes;
      }
      break;
    }
    case TaskKind::kGenerate: {
      p.sums.assign(2, 0.0);  // n, exact matches
      const size_t batch = static_cast<size_t>(std::max(1, t.spec.batch));
      infer::GenerateOptions o;
      o.max_tokens = t.spec.max_tokens;
      o.temperature = 0;
      o.stop_ids = t.stop_ids;
      // Batches are the task's fixed blocks of `batch` questions (cut by the range's ends), so ranks
      // that split at multiples of the batch generate in exactly the batches one process would.
      for (size_t b0 = begin, b1 = 0; b0 < end; b0 = b1) {
        b1 = std::min(end, (b0 / batch + 1) * batch);
        std::vector<std::vector<int32_t>> prompts;
        for (size_t u = b0; u < b1; ++u) prompts.push_back(t.gen[u].prompt);
        std::vector<std::string> text(prompts.size());
        infer::generate(model, prompts, o, [&](size_t row, int32_t id) {
          if (id >= 0 && static_cast<size_t>(id) < t.token_bytes.size())
            text[row] += t.token_bytes[static_cast<size_t>(id)];
          return text[row].find(kGenStop) == std::string::npos;
        });
        for (size_t r = 0; r < prompts.size(); ++r) {
          std::string out = text[r];
          const size_t cut = out.find(kGenStop);
          if (cut != std::string::npos) out.resize(cut);
          const std::string got = extract_answer(t, out);
          p.sums[0] += 1;
          p.sums[1] += !got.empty() && got == t.gen[b0 + r].reference ? 1 : 0;
        }
      }
      break;
    }
  }
  return p;
}

Partial add(const Partial& a, const Partial& b) {
  if (a.sums.empty()) return b;
  if (b.sums.empty()) return a;
  if (a.sums.size() != b.sums.size())
    throw Error(ExitCode::kInternal, "eval::add: partials of different tasks");
  Partial p = a;
  for (size_t i = 0; i < p.sums.size(); ++i) p.sums[i] += b.sums[i];
  return p;
}

namespace {
// lm-evaluation-harness's mean_stderr of 0/1 values from their count and sum: the sample standard
// deviation (n - 1) over sqrt(n); 0 for fewer than 2 (it reports "N/A").
double mean_stderr(double n, double sum) {
  if (n < 2) return 0;
  const double mean = sum / n;
  const double ss = sum * (1 - mean) * (1 - mean) + (n - sum) * mean * mean;
  return std::sqrt(ss / (n - 1)) / std::sqrt(n);
}
}  // namespace

std::map<std::string, double> scores(const Task& t, const Partial& total) {
  std::map<std::string, double> m;
  const auto& s = total.sums;
  const auto need = [&](size_t k) {
    if (s.size() != k) throw Error(ExitCode::kInternal, "eval::scores: a partial of another task kind");
  };
  switch (t.spec.kind) {
    case TaskKind::kMultipleChoice: {
      need(3);
      const double n = s[0];
      m["n"] = n;
      m["acc"] = n > 0 ? s[1] / n : 0;
      m["acc_norm"] = n > 0 ? s[2] / n : 0;
      m["acc_stderr"] = mean_stderr(n, s[1]);
      m["acc_norm_stderr"] = mean_stderr(n, s[2]);
      break;
    }
    case TaskKind::kPerplexity: {
      need(4);
      m["n"] = s[0];
      m["tokens"] = s[2];
      m["bytes"] = s[3];
      m["nll_per_token"] = s[2] > 0 ? s[1] / s[2] : 0;
      m["perplexity"] = std::exp(m["nll_per_token"]);
      m["bits_per_byte"] = s[3] > 0 ? s[1] / std::log(2.0) / s[3] : 0;
      break;
    }
    case TaskKind::kGenerate: {
      need(2);
      m["n"] = s[0];
      m["exact_match"] = s[0] > 0 ? s[1] / s[0] : 0;
      m["exact_match_stderr"] = mean_stderr(s[0], s[1]);
      break;
    }
  }
  return m;
}

std::string headline_score(TaskKind k) {
  switch (k) {
    case TaskKind::kMultipleChoice:
      return "acc_norm";
    case TaskKind::kPerplexity:
      return "bits_per_byte";
    case TaskKind::kGenerate:
      return "exact_match";
  }
  return "";
}

bool higher_is_better(const std::string& score_name) {
  return !(score_name == "perplexity" || score_name == "bits_per_byte" || score_name == "nll_per_token" ||
           score_name.ends_with("_stderr"));
}

std::string metric_name(const std::string& task_name, const std::string& score_name) {
  return "task/" + task_name + "/" + score_name;
}

std::string scores_line(const std::vector<std::pair<std::string, double>>& scores) {
  const auto find = [&](const std::string& name) -> const double* {
    for (const auto& [n, v] : scores)
      if (n == name) return &v;
    return nullptr;
  };
  const auto is_count = [](const std::string& n) { return n == "n" || n == "tokens" || n == "bytes"; };
  const auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return std::string(buf);
  };
  std::string out;
  const auto add = [&](const std::string& piece) { out += (out.empty() ? "" : ", ") + piece; };
  for (const auto& [name, value] : scores) {
    if (is_count(name)) continue;
    const bool is_stderr = name.size() > 7 && name.compare(name.size() - 7, 7, "_stderr") == 0;
    if (is_stderr && find(name.substr(0, name.size() - 7)) != nullptr) continue;  // folded in below
    std::string piece = name + " " + number(value);
    if (const double* se = find(name + "_stderr")) piece += " \u00b1 " + number(*se);
    add(piece);
  }
  for (const auto& [name, value] : scores)
    if (is_count(name)) add(name + " " + std::to_string(static_cast<long long>(std::llround(value))));
  return out;
}

}  // namespace flotilla::eval
