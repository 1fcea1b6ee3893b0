// flotilla-worker sample --checkpoint DIR (--prompt TEXT --tokenizer TOK | --prompt-ids "1 2 3")
//                        [--tokens N] [--temperature T] [--top-k K] [--seed S]
#include <cstdio>
#include <sstream>

#include "engine/checkpoint/model_checkpoint.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/interop/peft.h"
#include "engine/model/base_weights.h"
#include "engine/tokenizer/bpe.h"
#include "engine/train/sampler.h"

namespace flotilla::cli {

int cmd_sample(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker sample --checkpoint DIR [--prompt TEXT --tokenizer TOK | --prompt-ids IDS]\n"
        "                              [--tokens N] [--temperature T] [--top-k K] [--seed S]\n\n"
        "Generates text from a checkpoint (a step-N directory, a checkpoints directory or a run\n"
        "directory: the newest verified checkpoint). With --tokenizer (the folder or file the data\n"
        "was prepared with: tokenizer.json, GPT-2's vocab.json + merges.txt, or our tokenizer JSON)\n"
        "the prompt is text (encoded as transformers' tokenizer(text), e.g. with Llama 3's BOS) and\n"
        "the output is decoded;\n"
        "without one, give --prompt-ids and the output is token ids. Defaults: 64 tokens,\n"
        "temperature 1.0, no top-k, seed 1.\n");
    return 0;
  }
  const auto checkpoint = args.value("--checkpoint");
  const auto prompt = args.value("--prompt");
  const auto prompt_ids = args.value("--prompt-ids");
  const auto tokenizer_path = args.value("--tokenizer");
  SampleOptions so;
  so.tokens = static_cast<int>(args.int_or("--tokens", 64));
  so.temperature = static_cast<float>(args.double_or("--temperature", 1.0));
  so.top_k = static_cast<int>(args.int_or("--top-k", 0));
  const auto seed = static_cast<uint64_t>(args.int_or("--seed", 1));
  args.finish("sample");
  if (!checkpoint) throw_usage("sample needs --checkpoint DIR");
  if (so.tokens < 1 || so.tokens > 100000) throw_usage("--tokens must be between 1 and 100000");

  std::vector<std::string> warnings;
  ModelCheckpoint ck = load_model_checkpoint(*checkpoint, &warnings);
  for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());

  std::optional<Tokenizer> tok;
  if (tokenizer_path) tok = Tokenizer::load(*tokenizer_path);
  std::vector<int32_t> context;
  if (prompt_ids) {
    std::istringstream in(*prompt_ids);
    std::string word;
    while (in >> word) context.push_back(static_cast<int32_t>(parse_int(word, "--prompt-ids")));
  } else if (prompt) {
    if (!tok) throw_usage("--prompt is text: give --tokenizer too, or use --prompt-ids");
    const std::vector<uint32_t> ids =
        tok->origin() == "tokenizer.json" ? tok->encode_model_input(*prompt) : tok->encode(*prompt);
    for (uint32_t id : ids) context.push_back(static_cast<int32_t>(id));
  }
  if (context.empty())  // start of a document: BOS where the tokenizer has one, else end-of-text
    context.push_back(tok ? static_cast<int32_t>(tok->bos_id().value_or(tok->eot_id())) : 0);
  for (int32_t id : context)
    if (id < 0 || id >= ck.dims.vocab_size)
      throw_usage("prompt token " + std::to_string(id) + " is outside the model's vocabulary of " +
                  std::to_string(ck.dims.vocab_size));
  if (tok && tok->vocab_size() > ck.dims.vocab_size)
    throw_usage("the tokenizer has " + std::to_string(tok->vocab_size()) + " tokens but the model only " +
                std::to_string(ck.dims.vocab_size) + ": use the tokenizer the data was prepared with");

  // A LoRA checkpoint samples its base (model.init_from, checked against the fingerprint the run
  // recorded) with the adapters applied unmerged, as the run evaluated it. A QLoRA one loads the
  // base as the run did, each projection quantised to NF4 as it is read (never whole in fp32), and
  // the forward runs through the NF4 kernels: the model the adapters were trained as.
  ModelOptions mo;
  mo.lora = ck.lora;
  Model model(ck.dims, ModelShard{}, nullptr, mo);
  if (ck.lora.enabled()) {
    model.set_base(interop::load_lora_base_weights(ck));
    std::fprintf(stderr, "%s r %d on %s (base %s%s)\n", ck.lora.nf4 ? "QLoRA" : "LoRA", ck.lora.rank,
                 lora_targets_text(ck.lora.targets).c_str(), ck.init_from.c_str(),
                 ck.lora.nf4 ? (ck.lora.double_quant ? ", quantised to 4-bit NF4 with double quantisation"
                                                     : ", quantised to 4-bit NF4")
                             : "");
  }
  model.set_params_from_full(ck.params.data());
  model.set_training(false);
  Rng rng(seed);
  const auto ids = sample_tokens(model, context, so, rng);
  if (tok) {
    std::vector<uint32_t> all;
    for (int32_t id : context) all.push_back(static_cast<uint32_t>(id));
    for (int32_t id : ids) all.push_back(static_cast<uint32_t>(id));
    const std::string text = tok->decode(all);  // bytes, written as they are
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  }
  std::fflush(stdout);
  std::fprintf(stderr, "sampled %zu tokens from %s (step %lld)\n", ids.size(), ck.dir.c_str(),
               static_cast<long long>(ck.step));
  return 0;
}

}  // namespace flotilla::cli
