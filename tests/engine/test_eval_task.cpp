// Evaluation tasks (engine/eval) on a small random model and a tokenizer trained on the example
// task files (resources/eval): lm-evaluation-harness's request construction (trailing space moved
// into the continuation, few-shot prompt, left cut to the context), acc / acc_norm as the argmax of
// the summed and the per-character log-likelihoods, partials that add up to the whole for any split,
// sliding-window perplexity scoring every token once, generation exact match through the regex,
// and bad task files refused with file and line. The numbers against transformers are
// test_eval_golden's.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <omp.h>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/eval/task.h"
#include "engine/eval/task_impl.h"
#include "engine/infer/generate.h"
#include "engine/infer/score.h"
#include "engine/model/gpt.h"
#include "engine/model/model_dims.h"
#include "engine/tokenizer/bpe.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

const std::string kRes = std::string(FLOTILLA_SOURCE_DIR) + "/resources/eval/";
const fs::path kTmp = fs::path(FLOTILLA_TEST_TMP) / "eval_task";

ModelDims small_dims(int ctx) {
  RunConfig c;
  apply_overrides(c, {"model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=4",
                      "model.n_kv_head=2", "model.n_embd=64", "model.ffn_dim=96", "model.vocab_size=320",
                      "model.max_seq_len=" + std::to_string(ctx), "train.seq_len=" + std::to_string(ctx)});
  validate_or_throw(c);
  return dims_from_config(c.model);
}

std::string write(const std::string& name, const std::string& text) {
  fs::create_directories(kTmp);
  const std::string p = (kTmp / name).string();
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::string& s) {
  const auto v = tok.encode_model_input(s);
  return {v.begin(), v.end()};
}

std::string decode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  return tok.decode(std::vector<uint32_t>(ids.begin(), ids.end()));
}

void multiple_choice(Model& m, const Tokenizer& tok, int ctx) {
  eval::TaskSpec spec;
  spec.path = kRes + "arc-mini.jsonl";
  const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
  CHECK(eval::task_spec(*t).name == "arc-mini");
  CHECK(eval::task_units(*t) == 20);
  // acc / acc_norm: the argmax over each example's choices, recomputed here from score().
  double acc = 0, acc_norm = 0;
  for (const auto& e : t->mc) {
    const auto s = infer::score(m, e.requests, static_cast<int>(e.requests.size()));
    size_t a = 0, b = 0;
    for (size_t k = 1; k < s.size(); ++k) {
      if (s[k].sum() > s[a].sum()) a = k;
      if (s[k].sum() / e.choice_chars[k] > s[b].sum() / e.choice_chars[b]) b = k;
    }
    acc += a == static_cast<size_t>(e.answer);
    acc_norm += b == static_cast<size_t>(e.answer);
  }
  const eval::Partial all = eval::run_units(m, *t, 0, 20);
  const auto sc = eval::scores(*t, all);
  CHECK(sc.at("n") == 20);
  CHECK_NEAR(sc.at("acc"), acc / 20, 0);
  CHECK_NEAR(sc.at("acc_norm"), acc_norm / 20, 0);
  const double p = acc / 20;
  CHECK_NEAR(sc.at("acc_stderr"), std::sqrt(p * (1 - p) * 20 / 19) / std::sqrt(20.0), 1e-12);
  // Any split adds up to the whole, bit for bit (each example is one forward whatever the range).
  const eval::Partial split = eval::add(
      eval::add(eval::run_units(m, *t, 0, 7), eval::run_units(m, *t, 7, 13)), eval::run_units(m, *t, 13, 20));
  CHECK(split.sums == all.sums);
  // The choice lengths are Python's len(choice): characters, without the " " delimiter.
  CHECK(t->mc[0].choice_chars[0] == 4);  // "iron"

  // The request: context's trailing whitespace moved into the continuation, the pair tokenized whole.
  const std::string f = write(
      "space.jsonl", "{\"context\": \"The cat sat \", \"choices\": [\"down\", \"up é\"], \"answer\": 1}\n");
  spec.path = f;
  const eval::TaskPtr s = eval::load_task(spec, tok, ctx);
  const auto& r = s->mc[0].requests[1];
  CHECK(r.ids == ids_of(tok, "The cat sat  up é"));
  CHECK(r.first == ids_of(tok, "The cat sat").size());
  CHECK(s->mc[0].choice_chars[1] == 4);  // "up é": 4 characters, 5 bytes
  // An empty context: the continuation after the BOS / EOS token (here <|endoftext|>).
  write("empty.jsonl", "{\"context\": \"\", \"choices\": [\"a b\", \"c\"], \"answer\": 0}\n");
  spec.path = (kTmp / "empty.jsonl").string();
  const eval::TaskPtr e = eval::load_task(spec, tok, ctx);
  CHECK(e->mc[0].requests[0].ids.front() == static_cast<int32_t>(tok.eot_id()));
  CHECK(e->mc[0].requests[0].first == 1);

  // Few-shot: the dev file's first N examples, each "context answer\n\n", before the context; the
  // whole cut from the left to the model's context + 1.
  spec.path = kRes + "arc-mini.jsonl";
  spec.dev_path = kRes + "arc-mini-dev.jsonl";
  spec.fewshot = 2;
  const eval::TaskPtr fs2 = eval::load_task(spec, tok, ctx);
  const std::string want =
      "Question: What color is the sky on a clear day?\nAnswer: blue\n\nQuestion: What do cows "
      "drink?\nAnswer: "
      "water\n\nQuestion: Which of these is a liquid at room temperature?\nAnswer: water";
  const auto& q = fs2->mc[0].requests[1];
  const std::vector<int32_t> full = ids_of(tok, want);
  CHECK(q.ids.size() == static_cast<size_t>(ctx) + 1 || q.ids.size() == full.size());
  CHECK(want.ends_with(decode(tok, q.ids)));
  CHECK(decode(tok, {q.ids.begin() + static_cast<std::ptrdiff_t>(q.first), q.ids.end()}) == " water");
  spec.fewshot = 9;
  CHECK_THROWS(eval::load_task(spec, tok, ctx), "has only 3 examples");
}

void perplexity(Model& m, const Tokenizer& tok, int ctx) {
  eval::TaskSpec spec;
  spec.path = kRes + "wiki-mini.txt";
  spec.kind = eval::TaskKind::kPerplexity;
  std::ifstream in(spec.path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> ids = ids_of(tok, text);
  for (int stride : {0, 7, ctx}) {
    spec.stride = stride;
    const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
    // Each token after the first is scored exactly once (by a window that sees ctx - stride before
    // it), except that a stride of the whole context leaves each window's first token unscored.
    std::vector<int> scored(ids.size(), 0);
    size_t begin = 0;
    const size_t st = stride ? static_cast<size_t>(stride) : static_cast<size_t>(ctx) / 2;
    for (const auto& w : t->windows) {
      CHECK(std::equal(w.request.ids.begin(), w.request.ids.end(),
                       ids.begin() + static_cast<std::ptrdiff_t>(begin)));
      for (size_t i = w.request.first; i < w.request.ids.size(); ++i) ++scored[begin + i];
      begin += st;
    }
    size_t once = 0, twice = 0;
    for (int c : scored) once += c == 1, twice += c > 1;
    CHECK(twice == 0);
    // (a last window of one token scores nothing and is left out: transformers' would divide by 0)
    const size_t windows = (ids.size() + static_cast<size_t>(ctx) - 1) / static_cast<size_t>(ctx);
    CHECK_MSG(once == (stride == ctx ? ids.size() - windows : ids.size() - 1), "stride %d: %zu of %zu",
              stride, once, ids.size());
    const auto sc = eval::scores(*t, eval::run_units(m, *t, 0, eval::task_units(*t)));
    CHECK(sc.at("tokens") == static_cast<double>(once));
    CHECK_NEAR(sc.at("perplexity"), std::exp(sc.at("nll_per_token")), 1e-9);
    if (stride == 7)
      CHECK(sc.at("bytes") == static_cast<double>(text.size() - tok.token_bytes(ids[0]).size()));
    CHECK_NEAR(sc.at("bits_per_byte"),
               sc.at("nll_per_token") * sc.at("tokens") / std::log(2.0) / sc.at("bytes"), 1e-9);
  }
  // A text inside one window: the nll is the direct sum over all its tokens.
  const std::string p = write("short.txt", "The pier is popular with people who fish.");
  spec.path = p;
  spec.stride = 0;
  const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
  const auto sc = eval::scores(*t, eval::run_units(m, *t, 0, 1));
  const auto direct = infer::score(m, {{ids_of(tok, "The pier is popular with people who fish."), 1}});
  CHECK_NEAR(sc.at("nll_per_token") * sc.at("tokens"), -direct[0].sum(), 1e-9);
  spec.stride = ctx + 1;
  spec.path = kRes + "wiki-mini.txt";
  CHECK_THROWS(eval::load_task(spec, tok, ctx), "--stride");
}

void generation(Model& m, const Tokenizer& tok, int ctx) {
  // The model's own greedy answer to a question becomes the reference: exact match 1; another 0.
  const std::string question = "Tom has 3 apples and buys 4 more. How many apples does he have?";
  eval::TaskSpec spec;
  spec.kind = eval::TaskKind::kGenerate;
  spec.answer_regex = "([!-~])";  // its first printable character
  spec.max_tokens = 12;
  spec.path = write("gen.jsonl", "{\"question\": \"" + question + "\", \"answer\": \"?\"}\n");
  infer::GenerateOptions o;
  o.max_tokens = 12;
  o.temperature = 0;
  o.use_cache = false;
  // The prompt as the task builds it: "Question: ...\nAnswer:", cut to leave room for the answer.
  const std::vector<int32_t> prompt = eval::load_task(spec, tok, ctx)->gen[0].prompt;
  CHECK(decode(tok, ids_of(tok, "Question: " + question + "\nAnswer:")).ends_with(decode(tok, prompt)));
  const auto g = infer::generate(m, {prompt}, o);
  std::string out;
  for (int32_t id : g[0].ids)
    if (!tok.is_special(static_cast<uint32_t>(id))) out += tok.token_bytes(static_cast<uint32_t>(id));
  out = out.substr(0, out.find("\n\n"));
  std::string letter;
  for (char c : out)
    if (c > ' ' && c <= '~' && std::string("\"\\,$.").find(c) == std::string::npos) {
      letter = std::string(1, c);
      break;
    }
  CHECK_MSG(!letter.empty(), "the random model's answer has a printable character: '%s' (%zu ids)",
            out.c_str(), g[0].ids.size());
  const std::string other = letter == "q" ? "z" : "q";
  spec.path =
      write("gen.jsonl", "{\"question\": \"" + question + "\", \"answer\": \"" + letter +
                             "\"}\n{\"question\": \"" + question + "\", \"answer\": \"" + other + "\"}\n");
  const eval::TaskPtr t = eval::load_task(spec, tok, ctx);
  CHECK(t->gen[0].reference == letter);
  CHECK(t->gen[1].reference == other);
  const auto sc = eval::scores(*t, eval::run_units(m, *t, 0, 2));
  CHECK(sc.at("n") == 2);
  CHECK_NEAR(sc.at("exact_match"), 0.5, 0);
  // GSM8K's default regex and its normalisation: "1,234." and "$1234" are the same answer.
  spec.answer_regex = "";
  spec.path = kRes + "gsm-mini.jsonl";
  const eval::TaskPtr gsm = eval::load_task(spec, tok, ctx);
  CHECK(gsm->gen.size() == 20 && gsm->gen[12].reference == "2000" && gsm->gen[11].reference == "-4");
  CHECK(eval::extract_answer(*gsm, "so #### $1,234.") == "");  // the regex wants digits after "#### "
  CHECK(eval::extract_answer(*gsm, "so #### 1,234.") == "1234");
  spec.answer_regex = "(unclosed";
  CHECK_THROWS(eval::load_task(spec, tok, ctx), "--regex");
}

void bad_files(const Tokenizer& tok) {
  eval::TaskSpec spec;
  const std::string ok = "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"answer\": 0}\n";
  struct Case {
    const char* name;
    std::string text;
    const char* want;
  };
  const std::vector<Case> cases = {
      {"missing.jsonl", ok + "{\"context\": \"a\", \"answer\": 0}\n",
       "missing.jsonl:2: missing field \"choices\""},
      {"range.jsonl", ok + ok + "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"answer\": 2}\n",
       "range.jsonl:3: answer 2 is out of range"},
      {"type.jsonl", "{\"context\": 5, \"choices\": [\"b\", \"c\"], \"answer\": 0}\n",
       "type.jsonl:1: field \"context\" must be a string"},
      {"utf8.jsonl", ok + "\n{\"context\": \"caf\xC3\", \"choices\": [\"b\", \"c\"], \"answer\": 0}\n",
       "utf8.jsonl:3: invalid UTF-8"},
      {"json.jsonl", ok + "{\"context\": \"a\",\n", "json.jsonl:2: not valid JSON"},
      {"empty.jsonl", "", "empty.jsonl:1: the file is empty"},
      {"blank.jsonl", "\n  \n", "blank.jsonl:1: the file has no examples"},
  };
  for (const Case& c : cases) {
    spec.path = write(c.name, c.text);
    CHECK_THROWS(eval::load_task(spec, tok, 64), c.want);
  }
  // A 100 MB line (written here, never committed) is refused at 1 MiB, naming its line.
  {
    const std::string p = (kTmp / "huge.jsonl").string();
    std::ofstream out(p, std::ios::binary);
    out << ok << ok << "{\"context\": \"";
    const std::string block(1 << 20, 'x');
    for (int i = 0; i < 100; ++i) out << block;
    out << "\"}\n";
    out.close();
    spec.path = p;
    CHECK_THROWS(eval::load_task(spec, tok, 64), "huge.jsonl:3: the line is over 1 MiB");
    fs::remove(p);
  }
  spec.kind = eval::TaskKind::kGenerate;
  spec.path = write("gen-missing.jsonl", "{\"question\": \"q\"}\n");
  CHECK_THROWS(eval::load_task(spec, tok, 64), "gen-missing.jsonl:1: missing field \"answer\"");
  spec.kind = eval::TaskKind::kPerplexity;
  spec.path = write("ppl-utf8.txt", "line one\nline \xFF two\n");
  CHECK_THROWS(eval::load_task(spec, tok, 64), "ppl-utf8.txt:2: invalid UTF-8");
  spec.kind = eval::TaskKind::kMultipleChoice;
  spec.path = kRes + "arc-mini.jsonl";
  spec.name = "bad name";
  CHECK_THROWS(eval::load_task(spec, tok, 64), "cannot name a task");
}

void names_and_kinds() {
  CHECK(eval::detect_task_kind(kRes + "arc-mini.jsonl") == eval::TaskKind::kMultipleChoice);
  CHECK(eval::detect_task_kind(kRes + "gsm-mini.jsonl") == eval::TaskKind::kGenerate);
  CHECK(eval::detect_task_kind(kRes + "wiki-mini.txt") == eval::TaskKind::kPerplexity);
  CHECK_THROWS(
      eval::detect_task_kind(write("typo.jsonl", "\n{\"context\": \"a\", \"choices\": [\"b\" \"c\"]}\n")),
      "typo.jsonl:2: not valid JSON");
  CHECK_THROWS(eval::detect_task_kind(write("other.jsonl", "{\"text\": \"a\"}\n")),
               "other.jsonl:1: a JSON object with neither");
  CHECK(eval::detect_task_kind(write("brace.txt", "plain text, not JSON\n{ later }\n")) ==
        eval::TaskKind::kPerplexity);
  CHECK(eval::metric_name("arc-mini", "acc_norm") == "task/arc-mini/acc_norm");
  CHECK(eval::headline_score(eval::TaskKind::kPerplexity) == "bits_per_byte");
  CHECK(!eval::higher_is_better("bits_per_byte") && eval::higher_is_better("acc_norm"));
  eval::TaskKind k{};
  CHECK(eval::parse_task_kind("generate", &k) && k == eval::TaskKind::kGenerate &&
        !eval::parse_task_kind("mc", &k));
}

}  // namespace

// The one-line form the terminal and the app's log print: stderrs folded in, counts whole, last.
void scores_line_form() {
  const std::string mc = eval::scores_line(
      {{"acc", 0.65}, {"acc_norm", 0.85}, {"acc_norm_stderr", 0.08192}, {"acc_stderr", 0.1094}, {"n", 20}});
  CHECK_MSG(mc == "acc 0.65 \u00b1 0.1094, acc_norm 0.85 \u00b1 0.08192, n 20", "%s", mc.c_str());
  const std::string ppl = eval::scores_line(
      {{"bits_per_byte", 6.2116}, {"bytes", 1087}, {"n", 20}, {"perplexity", 1385.18}, {"tokens", 647}});
  CHECK_MSG(ppl == "bits_per_byte 6.212, perplexity 1385, bytes 1087, n 20, tokens 647", "%s", ppl.c_str());
}

int main() {
  scores_line_form();
  // One thread: tiny matmuls gain nothing from two on a shared machine, and lose to OpenMP's waits.
  omp_set_num_threads(1);
  fs::remove_all(kTmp);
  const Tokenizer tok =
      Tokenizer::train_files({kRes + "arc-mini.jsonl", kRes + "gsm-mini.jsonl", kRes + "wiki-mini.txt"}, 320);
  const int ctx = 48;
  Model m(small_dims(ctx));
  m.init_random(11);
  m.set_training(false);
  multiple_choice(m, tok, ctx);
  perplexity(m, tok, ctx);
  generation(m, tok, ctx);
  bad_files(tok);
  names_and_kinds();
  return flotilla_test::summary("test_eval_task");
}
