// Sampling a chat-tuned model through the real worker (issue 34 #6): a tiny Llama trained on
// ChatML conversations (the golden SmolLM2 tokenizer, whose tokenizer_config.json has a chat
// template) is sampled with `flotilla-worker sample`. The prompt must be wrapped as a user turn
// with the assistant's generation prompt (the ids are checked against the literal ChatML text),
// the answer must be the greedy continuation of exactly those ids (recomputed here with the
// checkpoint's model) and end at <|im_end|>, and only the answer is printed. The same run's
// training-time samples (eval.sample_every) end at the end token too instead of running to
// eval.sample_tokens, and the other options (--chat off, --stop, --special, --top-p) do what they say.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/data/chat_format.h"
#include "engine/model/gpt.h"
#include "engine/tokenizer/bpe.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

const char* kFrance = "What is the capital of France?";
const char* kJapan = "What is the capital of Japan?";

std::string chats() {
  std::string out;
  for (int i = 0; i < 200; ++i) {
    const bool france = i % 2 == 0;
    const nlohmann::json rec = {
        {"messages",
         {{{"role", "user"}, {"content", france ? kFrance : kJapan}},
          {{"role", "assistant"},
           {"content", france ? "The capital of France is Paris." : "The capital of Japan is Tokyo."}}}}};
    out += rec.dump() + "\n";
  }
  return out;
}

std::string config(const std::string& data) {
  return "[run]\nname = \"chat\"\nseed = 3\nthreads = 2\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
         "n_embd = 64\nffn_dim = 128\nvocab_size = 600\nmax_seq_len = 64\n"
         "[data]\nsource = \"shards\"\ntrain = \"" +
         data +
         "/train_*.bin\"\n"
         "[train]\nsteps = 160\nmicro_batch = 4\nseq_len = 64\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 10\n"
         "[checkpoint]\nevery = 0\n[eval]\nevery = 0\nsample_every = 80\nsample_tokens = 48\n";
}

// The JSON object `sample --json` prints (its own line; stderr lines are around it).
nlohmann::json json_line(const std::string& output) {
  size_t at = 0;
  while (at < output.size()) {
    const size_t end = output.find('\n', at);
    const std::string line = output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line, nullptr, false);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return nlohmann::json();
}

// Greedy decoding of `context` by the checkpoint's model, written out here (argmax of the last
// position, no KV cache) until `stop` or `limit` tokens: what the worker's answer must be.
std::vector<int32_t> greedy(const std::string& run_dir, std::vector<int32_t> context, int32_t stop,
                            int limit) {
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(run_dir, nullptr);
  flotilla::Model m(ck.dims);
  m.set_params_from_full(ck.params.data());
  m.set_training(false);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < limit) {
    const int T = static_cast<int>(context.size());
    m.forward(context.data(), nullptr, 1, T);
    const float* logits = m.logits() + static_cast<size_t>(T - 1) * ck.dims.padded_vocab;
    const int32_t next = static_cast<int32_t>(std::max_element(logits, logits + ck.dims.vocab_size) - logits);
    out.push_back(next);
    context.push_back(next);
    if (next == stop) break;
  }
  return out;
}

}  // namespace

// The generation prompt of each golden tokenizer's format equals its chat template rendered with
// add_generation_prompt=True (recorded with jinja2 from the tokenizer_config.json templates), and
// the end of turn is a stop token.
static void check_generation_prompts() {
  const std::string golden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/";
  struct Case {
    const char* name;
    const char* rendered;
    const char* end_of_turn;
  };
  const Case cases[] = {
      {"smollm2", "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
      {"qwen", "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
      {"llama3",
       "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|><|start_header_id|>"
       "assistant<|"
       "end_header_id|>\n\n",
       "<|eot_id|>"},
  };
  for (const Case& c : cases) {
    const flotilla::Tokenizer tok = flotilla::Tokenizer::load(golden + c.name);
    const auto format = flotilla::tokenizer_chat_format(golden + c.name, tok);
    CHECK_MSG(format.has_value(), "%s: no chat format found", c.name);
    const std::vector<uint32_t> ids = flotilla::chat_prompt_ids(tok, *format, {{"user", "Hi?", {}}});
    CHECK_MSG(tok.decode(ids) == c.rendered, "%s: [%s]", c.name, tok.decode(ids).c_str());
    CHECK_MSG(ids == tok.encode(c.rendered, true), "%s: ids differ from the template's text", c.name);
    const std::vector<uint32_t> stops = flotilla::stop_token_ids(tok, format);
    CHECK_MSG(std::find(stops.begin(), stops.end(), *tok.token_id(c.end_of_turn)) != stops.end(),
              "%s: %s does not stop", c.name, c.end_of_turn);
  }
  // GPT-2's tokenizer has no chat template: plain continuation.
  const flotilla::Tokenizer gpt2 = flotilla::Tokenizer::load(golden + "gpt2");
  CHECK(!flotilla::tokenizer_chat_format(golden + "gpt2", gpt2).has_value());
}

int main() {
  check_generation_prompts();
  const std::string root = fresh_dir("sample_chat");
  const std::string tok_dir = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/smollm2";
  const flotilla::Tokenizer tok = flotilla::Tokenizer::load(tok_dir);
  const int32_t im_end = static_cast<int32_t>(*tok.token_id("<|im_end|>"));
  write_text(root + "/chats.jsonl", chats());
  const auto prep = run_worker({"data", "prepare", "--input", root + "/chats.jsonl", "--tokenizer", tok_dir,
                                "--out", root + "/data", "--val-fraction", "0"});
  CHECK_MSG(prep.exit_code == 0 && prep.output.find("chatml") != std::string::npos, "data prepare: %s",
            prep.output.c_str());
  // The tokenizer beside the shards, as the app's Data page leaves it: the run's tokenizer
  // (run_tokenizer_path), which the training-time samples stop with.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(tok_dir + "/" + f, root + "/data/" + f);
  const std::string run = root + "/run";
  write_text(root + "/chat.toml", config(root + "/data"));
  const auto trained = run_worker({"train", "--config", root + "/chat.toml", "--out-dir", run, "--quiet"},
                                  {"OMP_NUM_THREADS=2", "FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(trained.exit_code == 0, "train: %s", trained.output.c_str());

  // Training-time samples (prompted with the document start) end at an end token, not at 48.
  int samples = 0;
  for (const nlohmann::json& r : read_metrics(run)) {
    if (r.value("type", "") != "sample") continue;
    const std::vector<int32_t> ids = r["tokens"].get<std::vector<int32_t>>();
    ++samples;
    if (r["step"].get<int64_t>() < 160) continue;
    CHECK_MSG(!ids.empty() && ids.size() < 48 && (ids.back() == im_end || ids.back() == 0),
              "the last training-time sample runs %zu tokens and ends with %d, not at <|im_end|> (%d)",
              ids.size(), ids.empty() ? -1 : ids.back(), im_end);
  }
  CHECK_MSG(samples == 2, "%d training-time samples (expected 2)", samples);

  for (const char* question : {kFrance, kJapan}) {
    const auto r = run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", question,
                               "--temperature", "0", "--json"});
    CHECK_MSG(r.exit_code == 0, "sample: %s", r.output.c_str());
    const nlohmann::json j = json_line(r.output);
    CHECK_MSG(j.is_object(), "no JSON line in: %s", r.output.c_str());
    if (!j.is_object()) continue;
    // The prompt is the ChatML user turn and the assistant's generation prompt, tokenized as one text.
    const std::vector<int32_t> prompt = j["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<uint32_t> u(prompt.begin(), prompt.end());
    const std::string rendered = tok.decode(u);
    const std::string expected_prompt =
        std::string("<|im_start|>user\n") + question + "<|im_end|>\n<|im_start|>assistant\n";
    CHECK_MSG(rendered == expected_prompt, "prompt rendered as [%s], expected [%s]", rendered.c_str(),
              expected_prompt.c_str());
    std::vector<int32_t> expected_prompt_ids;
    for (uint32_t id : tok.encode(expected_prompt, true))
      expected_prompt_ids.push_back(static_cast<int32_t>(id));
    CHECK_MSG(prompt == expected_prompt_ids, "the prompt ids are not those of the ChatML text");
    // The answer: greedy decoding of those ids, ending at <|im_end|>; the text leaves it out.
    const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
    CHECK_MSG(ids == greedy(run, prompt, im_end, 64), "the worker's ids are not the greedy continuation");
    CHECK_MSG(!ids.empty() && ids.back() == im_end && ids.size() < 64,
              "the answer does not end at <|im_end|>");
    CHECK_MSG(j["stop"] == "end token" && j["chat_format"] == "chatml", "%s", j.dump().c_str());
    const std::string answer = j["text"].get<std::string>();
    const std::string want = question == std::string(kFrance) ? "The capital of France is Paris."
                                                              : "The capital of Japan is Tokyo.";
    CHECK_MSG(answer == want, "answer [%s], expected [%s]", answer.c_str(), want.c_str());
  }

  // Plain output: only the answer on stdout (the worker's notes go to stderr, after it).
  {
    const std::string log = root + "/plain.out";
    const pid_t pid =
        spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>/dev/null", FLOTILLA_WORKER_PATH, "sample",
               "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", kFrance, "--temperature", "0"},
              {}, log);
    CHECK(wait_exit(pid) == 0);
    const std::string out = read_file(log);  // stdout alone
    CHECK_MSG(out == "The capital of France is Paris.\n", "stdout: [%s]", out.c_str());
  }
  // --special keeps the end token; a --stop string cuts the answer before it.
  {
    const auto r = run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", kFrance,
                               "--temperature", "0", "--json", "--special"});
    CHECK_MSG(json_line(r.output)["text"] == "The capital of France is Paris.<|im_end|>", "%s",
              r.output.c_str());
    const auto s = run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", kFrance,
                               "--temperature", "0", "--json", "--stop", " is"});
    const nlohmann::json j = json_line(s.output);
    CHECK_MSG(j["text"] == "The capital of France" && j["stop"] == "stop string", "%s", s.output.c_str());
  }
  // --chat off continues the text itself (no chat turn); --top-p 0.01 keeps only the top token,
  // so it samples what greedy does.
  {
    const auto off = run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", kFrance,
                                 "--temperature", "0", "--json", "--chat", "off", "--tokens", "4"});
    const nlohmann::json j = json_line(off.output);
    std::vector<uint32_t> expect = tok.encode_model_input(kFrance);
    CHECK_MSG(j["chat_format"].is_null() && j["prompt_ids"].get<std::vector<uint32_t>>() == expect, "%s",
              off.output.c_str());
    const auto greedy_json = json_line(run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir,
                                                   "--prompt", kJapan, "--temperature", "0", "--json"})
                                           .output);
    const auto top_p =
        json_line(run_worker({"sample", "--checkpoint", run, "--tokenizer", tok_dir, "--prompt", kJapan,
                              "--temperature", "1", "--top-p", "0.01", "--seed", "7", "--json"})
                      .output);
    CHECK_MSG(top_p["ids"] == greedy_json["ids"], "top-p 0.01: %s vs %s", top_p.dump().c_str(),
              greedy_json.dump().c_str());
  }
  std::printf(
      "sample chat: prompt wrapped in ChatML, greedy answer ends at <|im_end|>, training samples stop\n");
  return flotilla_test::summary("test_sample_chat");
}
