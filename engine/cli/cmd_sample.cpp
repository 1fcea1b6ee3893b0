// flotilla-worker sample (--checkpoint DIR | --model HF_DIR|org/name)
//                        (--prompt TEXT [--tokenizer TOK] | --prompt-ids "1 2 3")
//                        [--tokens N] [--temperature T] [--top-k K] [--top-p P]
//                        [--repetition-penalty R] [--seed S] [--no-cache]
//                        [--chat auto|on|off] [--chat-format F] [--system TEXT] [--stop TEXT]...
//                        [--special] [--ignore-eos] [--json]
//
// Decision: a chat model is sampled as it was trained. Its prompt is rendered as a user turn by the
// same renderer that prepared its chat data (data/chat_format.h), followed by the format's
// generation prompt, and generation ends at the end of turn or the end of text. Only the answer is
// printed, as it is generated (flushed token by token, so the app can show it arriving), without
// special tokens unless --special. The model comes from infer::load_for_inference (a checkpoint of
// any layout gathered onto one device, LoRA unmerged over its base, or a Hugging Face folder), and
// generation is infer::generate's KV-cache path (--no-cache: the recompute reference).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/data/chat_format.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {
namespace {

// The answer's text: the generated ids decoded, special tokens left out unless `special`.
std::string answer_text(const Tokenizer& tok, const std::vector<int32_t>& ids, bool special) {
  std::vector<uint32_t> kept;
  for (int32_t id : ids)
    if (special || !tok.is_special(static_cast<uint32_t>(id))) kept.push_back(static_cast<uint32_t>(id));
  return tok.decode(kept);
}

}  // namespace

int cmd_sample(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker sample (--checkpoint DIR | --model HF_DIR|org/name)\n"
        "                              [--prompt TEXT [--tokenizer TOK] | --prompt-ids IDS]\n"
        "                              [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
        "                              [--repetition-penalty R] [--seed S] [--no-cache] [--device cpu|cuda]\n"
        "                              [--chat auto|on|off] [--chat-format F] [--system TEXT]\n"
        "                              [--stop TEXT]... [--special] [--ignore-eos] [--json]\n\n"
        "Generates text from a checkpoint (a step-N directory, a checkpoints directory or a run\n"
        "directory: the newest verified checkpoint; a tensor- or pipeline-parallel one is gathered\n"
        "onto one device) or from a Hugging Face model (--model: a local folder, or a Hub name from\n"
        "the Hugging Face cache; its own tokenizer is used unless --tokenizer). With --tokenizer\n"
        "(the folder or file the data was prepared with: tokenizer.json, GPT-2's vocab.json +\n"
        "merges.txt, our tokenizer JSON, or a Hub name org/name, its tokenizer from the Hugging\n"
        "Face cache) the prompt is text and the answer is printed as text, as it is generated;\n"
        "a text --prompt without --tokenizer uses the run's (model.init_from's, else the one beside\n"
        "its train shards, as eval and chat find it). --prompt-ids without --tokenizer prints ids.\n\n"
        "A chat model (its tokenizer's folder has a chat template, and the tokenizer the special\n"
        "tokens of llama3, chatml or qwen3) is sampled as it was trained: the prompt becomes a user\n"
        "turn (after a --system turn when given) in the format its chat data was prepared in, followed\n"
        "by the assistant's generation prompt, and only the answer is printed. --chat off continues\n"
        "the prompt as plain text (encoded as transformers' tokenizer(text), e.g. with Llama 3's BOS);\n"
        "--chat on or --chat-format F uses a chat format where auto would not. An empty prompt starts\n"
        "a document (BOS, else end-of-text).\n\n"
        "Generation ends after --tokens N new tokens (64), at the chat format's end of turn\n"
        "(<|im_end|>, <|eot_id|>) or the tokenizer's end of text (EOS), unless --ignore-eos, or\n"
        "where the answer reaches a --stop string (left out of the answer). Special tokens are left\n"
        "out of the answer unless --special. --temperature 0 is greedy (default 1.0); --top-k K keeps\n"
        "the K most likely tokens (0: all), --top-p P the most likely whose mass reaches P (1: all);\n"
        "--repetition-penalty R divides the logit of every token already in the context by R (a\n"
        "negative one is multiplied), as transformers does (1: off); --seed S (1). Generation uses a\n"
        "KV cache (the prompt prefilled once, then one token at a time); --no-cache recomputes the\n"
        "whole context for every token (the reference, slower); --device cuda generates on the GPU\n"
        "(fp32).\n"
        "--json prints one JSON object at the end instead: prompt_ids, ids (the\n"
        "generated ids, the end token included), text, stop (\"end token\", \"stop string\",\n"
        "\"length\") and chat_format.\n\n"
        "A LoRA checkpoint samples its base (the run's model.init_from) with the adapter unmerged; a\n"
        "QLoRA one (lora.base_quant = \"nf4\") the base quantised to 4-bit NF4 as the run trained over "
        "it.\n");
    return 0;
  }
  const auto checkpoint = args.value("--checkpoint");
  const auto hf_model = args.value("--model");
  const auto prompt = args.value("--prompt");
  const auto prompt_ids = args.value("--prompt-ids");
  auto tokenizer_path = args.value("--tokenizer");
  const std::string chat_mode = args.value_or("--chat", "auto");
  const auto chat_format_flag = args.value("--chat-format");
  const auto system = args.value("--system");
  const std::vector<std::string> stops = args.values("--stop");
  const bool special = args.flag("--special");
  const bool ignore_eos = args.flag("--ignore-eos");
  const bool json = args.flag("--json");
  infer::GenerateOptions so;
  so.max_tokens = static_cast<int>(args.int_or("--tokens", 64));
  so.temperature = static_cast<float>(args.double_or("--temperature", 1.0));
  so.top_k = static_cast<int>(args.int_or("--top-k", 0));
  so.top_p = static_cast<float>(args.double_or("--top-p", 1.0));
  const auto repetition_penalty = static_cast<float>(args.double_or("--repetition-penalty", 1.0));
  const auto seed = static_cast<uint64_t>(args.int_or("--seed", 1));
  const bool no_cache = args.flag("--no-cache");
  const std::string device = args.value_or("--device", "cpu");
  so.repetition_penalty = repetition_penalty;
  args.finish("sample");
  if (checkpoint.has_value() == hf_model.has_value())
    throw_usage(
        "sample needs one of --checkpoint DIR (a run's checkpoint) or --model HF_DIR (a Hugging Face "
        "folder or org/name)");
  if (!(repetition_penalty > 0)) throw_usage("--repetition-penalty must be above 0 (1: off)");
  if (so.max_tokens < 1 || so.max_tokens > 100000) throw_usage("--tokens must be between 1 and 100000");
  if (so.temperature < 0) throw_usage("--temperature must be 0 (greedy) or more");
  if (so.top_k < 0) throw_usage("--top-k must be 0 (no limit) or more");
  if (!(so.top_p > 0 && so.top_p <= 1)) throw_usage("--top-p must be above 0 and at most 1");
  if (chat_mode != "auto" && chat_mode != "on" && chat_mode != "off")
    throw_usage("--chat takes auto, on or off, not '" + chat_mode + "'");
  for (const std::string& s : stops)
    if (s.empty()) throw_usage("--stop needs a non-empty text");

  infer::LoadRequest request;
  request.checkpoint = checkpoint.value_or("");
  request.hf_model = hf_model.value_or("");
  request.device = device;
  infer::LoadedModel loaded = infer::load_for_inference(request);
  for (const auto& w : loaded.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // A plain checkpoint is named by the closing line; an adapter or a Hugging Face model up front.
  if (loaded.step < 0 || loaded.model->lora().enabled())
    std::fprintf(stderr, "%s\n", loaded.description.c_str());
  Model& model = *loaded.model;
  const ModelDims& dims = model.dims();
  // The model's own tokenizer when none is given: a Hugging Face folder's, or for a text prompt the
  // run's (found as the run found it, as eval and chat do); --prompt-ids without --tokenizer stay ids.
  if (!tokenizer_path && !loaded.tokenizer.empty() && (hf_model || (prompt && !prompt_ids))) {
    tokenizer_path = loaded.tokenizer;
    if (!hf_model) std::fprintf(stderr, "tokenizer: %s (the run's)\n", tokenizer_path->c_str());
  }

  std::optional<Tokenizer> tok;
  if (tokenizer_path) tok = Tokenizer::load(*tokenizer_path);
  if (!tok && (system || !stops.empty() || chat_format_flag || chat_mode == "on"))
    throw_usage("--system, --stop, --chat on and --chat-format need --tokenizer (the run's tokenizer)");

  // The chat format: --chat-format, else the tokenizer's when it is a chat model (auto) or asked
  // for (on); none for --chat off, a plain continuation, or an empty prompt.
  std::optional<ChatFormat> format;
  if (tok && chat_mode != "off") {
    if (chat_format_flag) {
      ChatFormat f{};
      if (!parse_chat_format(*chat_format_flag, &f))
        throw_usage("--chat-format takes llama3, chatml, qwen3 or plain, not '" + *chat_format_flag + "'");
      if (f != ChatFormat::kPlain) format = f;
    } else if (chat_mode == "on") {
      format = default_chat_format(*tok);
      if (!format)
        throw_usage(
            *tokenizer_path +
            " has none of the chat tokens of llama3, chatml or qwen3: give --chat-format, or --chat off");
    } else {
      format = tokenizer_chat_format(*tokenizer_path, *tok);
    }
  }
  if (format && (!prompt || prompt->empty()) && !system) format.reset();  // nothing to say: a document

  std::vector<int32_t> context;
  if (prompt_ids) {
    std::istringstream in(*prompt_ids);
    std::string word;
    while (in >> word) context.push_back(static_cast<int32_t>(parse_int(word, "--prompt-ids")));
  } else if (format) {
    std::vector<ChatMessage> messages;
    if (system) messages.push_back({"system", *system, {}});
    messages.push_back({"user", prompt.value_or(""), {}});
    for (uint32_t id : chat_prompt_ids(*tok, *format, messages)) context.push_back(static_cast<int32_t>(id));
  } else if (prompt && !prompt->empty()) {
    if (!tok) throw_usage("--prompt is text: give --tokenizer too, or use --prompt-ids");
    const std::vector<uint32_t> ids =
        tok->origin() == "tokenizer.json" ? tok->encode_model_input(*prompt) : tok->encode(*prompt);
    for (uint32_t id : ids) context.push_back(static_cast<int32_t>(id));
  }
  if (context.empty())  // start of a document: BOS where the tokenizer has one, else end-of-text
    context.push_back(tok ? static_cast<int32_t>(tok->bos_id().value_or(tok->eot_id())) : 0);
  for (int32_t id : context)
    if (id < 0 || id >= dims.vocab_size)
      throw_usage("prompt token " + std::to_string(id) + " is outside the model's vocabulary of " +
                  std::to_string(dims.vocab_size));
  if (tok && tok->vocab_size() > dims.vocab_size)
    throw_usage("the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens but the model only " +
                std::to_string(dims.vocab_size) + ": use the tokenizer the data was prepared with");
  if (tok && !ignore_eos)
    for (uint32_t id : stop_token_ids(*tok, format)) so.stop_ids.push_back(static_cast<int32_t>(id));
  if (format) {
    std::string ends;
    for (int32_t id : so.stop_ids)
      ends += (ends.empty() ? "" : ", ") + tok->token_bytes(static_cast<uint32_t>(id));
    std::fprintf(stderr, "chat format %s: the prompt is a user turn; the answer ends at %s\n",
                 chat_format_name(*format), ends.empty() ? "the token limit" : ends.c_str());
  }

  // The answer as it grows: printed up to what a stop string could still cut (its length - 1
  // bytes are held back), and cut where a stop string first appears.
  std::vector<int32_t> generated;
  std::string text;
  size_t printed = 0;
  size_t hold = 0;
  for (const std::string& s : stops) hold = std::max(hold, s.size() - 1);
  std::string stop = "length";
  auto on_token = [&](size_t, int32_t id) {
    generated.push_back(id);
    if (!tok) {
      if (!json) std::printf("%s%d", generated.size() > 1 ? " " : "", id);
      std::fflush(stdout);
      return true;
    }
    text = answer_text(*tok, generated, special);
    size_t cut = std::string::npos;
    for (const std::string& s : stops) cut = std::min(cut, text.find(s));
    if (cut != std::string::npos) {
      text.resize(cut);
      stop = "stop string";
    }
    const bool ends = cut != std::string::npos ||
                      std::find(so.stop_ids.begin(), so.stop_ids.end(), id) != so.stop_ids.end();
    const size_t ready = ends ? text.size() : (text.size() > hold ? text.size() - hold : 0);
    if (!json && ready > printed) {
      std::fwrite(text.data() + printed, 1, ready - printed, stdout);  // bytes, written as they are
      std::fflush(stdout);
      printed = ready;
    }
    return cut == std::string::npos;
  };
  so.seed = seed;
  so.use_cache = !no_cache;
  const auto ids = infer::generate(model, {context}, so, on_token)[0].ids;
  if (stop == "length" && !ids.empty() &&
      std::find(so.stop_ids.begin(), so.stop_ids.end(), ids.back()) != so.stop_ids.end())
    stop = "end token";
  if (tok && !json && text.size() > printed)
    std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = context;
    j["ids"] = ids;
    j["text"] = tok ? nlohmann::json(text) : nlohmann::json(nullptr);
    j["stop"] = stop;
    j["chat_format"] = format ? nlohmann::json(chat_format_name(*format)) : nlohmann::json(nullptr);
    std::printf("%s", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
  const std::string why =
      stop == "end token"     ? "stopped at " + tok->token_bytes(static_cast<uint32_t>(ids.back()))
      : stop == "stop string" ? std::string("stopped at a stop string")
                              : "stopped at the limit of " + std::to_string(so.max_tokens) + " tokens";
  if (loaded.step >= 0)
    std::fprintf(stderr, "sampled %zu tokens from %s (step %lld); %s\n", ids.size(), loaded.source.c_str(),
                 static_cast<long long>(loaded.step), why.c_str());
  else
    std::fprintf(stderr, "sampled %zu tokens from %s; %s\n", ids.size(), loaded.source.c_str(), why.c_str());
  return 0;
}

}  // namespace flotilla::cli
