// flotilla-worker bench-generate (--model HF_DIR | --checkpoint DIR) [--batch B] [--prompt-len P]
//                                [--tokens N] [--threads T] [--dtype fp32|bf16] [--no-cache] [--json]
//
// Generation speed of infer::generate: B prompts of P random ids, greedy, N new tokens each, no end
// token. Prefill tokens/s = B*P / (time to every row's first token); decode tokens/s = B*(N-1) /
// (the rest). scripts/bench-generate runs it beside transformers' generate on the same model.
//
// Decision: one warm-up generation of the same shapes first (buffers, the cache, oneDNN's kernels
// are made once), then one timed run; the time of the prefill is read where the last row's first
// token arrives (the on_token callback), so the decode figure never includes it.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"

namespace flotilla::cli {

int cmd_bench_generate(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker bench-generate (--model HF_DIR | --checkpoint DIR) [--batch B]\n"
        "                                      [--prompt-len P] [--tokens N] [--threads T]\n"
        "                                      [--dtype fp32|bf16] [--no-cache] [--profile] [--json]\n\n"
        "Measures generation speed: B prompts (1) of P random token ids (128), greedy, N new tokens\n"
        "(32) each with no end token, on T CPU threads (0: all cores). Prints prefill tokens/s (B*P\n"
        "over the time to every row's first token) and decode tokens/s (B*(N-1) over the rest), after\n"
        "one untimed warm-up of the same shapes. --dtype bf16 runs the matmuls in bf16 (fp32\n"
        "storage); --no-cache the recompute reference; --profile prints the time per kernel family\n"
        "of the timed run to stderr. --json prints one JSON object.\n"
        "scripts/bench-generate compares it with transformers' generate on the same model.\n");
    return 0;
  }
  infer::LoadRequest request;
  request.checkpoint = args.value_or("--checkpoint", "");
  request.hf_model = args.value_or("--model", "");
  const int batch = static_cast<int>(args.int_or("--batch", 1));
  const int prompt_len = static_cast<int>(args.int_or("--prompt-len", 128));
  const int tokens = static_cast<int>(args.int_or("--tokens", 32));
  const int threads = static_cast<int>(args.int_or("--threads", 0));
  const std::string dtype = args.value_or("--dtype", "fp32");
  const bool no_cache = args.flag("--no-cache");
  const bool json = args.flag("--json");
  const bool profile = args.flag("--profile");
  args.finish("bench-generate");
  if (batch < 1 || prompt_len < 1 || tokens < 2)
    throw_usage("--batch and --prompt-len must be >= 1, --tokens >= 2");
  if (dtype != "fp32" && dtype != "bf16") throw_usage("--dtype takes fp32 or bf16, not '" + dtype + "'");

  infer::LoadedModel loaded = infer::load_for_inference(request);
  Model& model = *loaded.model;
  Backend& be = model.backend();
  be.set_threads(threads);
  if (dtype == "bf16") be.set_matmul_dtype(DType::kBF16);
  if (prompt_len + tokens > model.dims().max_seq_len)
    throw_usage("--prompt-len + --tokens exceed the model's context of " +
                std::to_string(model.dims().max_seq_len));
  Rng rng(1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  for (auto& p : prompts)
    for (int i = 0; i < prompt_len; ++i)
      p.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(model.dims().vocab_size))));
  infer::GenerateOptions o;
  o.temperature = 0;
  o.use_cache = !no_cache;
  o.max_tokens = 2;
  infer::generate(model, prompts, o);  // warm-up

  using Clock = std::chrono::steady_clock;
  o.max_tokens = tokens;
  Clock::time_point first{};
  size_t seen = 0;
  if (profile && be.supports(BackendFeature::kProfile)) {
    be.reset_profile();
    be.set_profiling(true);
  }
  const Clock::time_point t0 = Clock::now();
  infer::generate(model, prompts, o, [&](size_t, int32_t) {
    if (++seen == static_cast<size_t>(batch)) first = Clock::now();
    return true;
  });
  const Clock::time_point t1 = Clock::now();
  if (profile)
    for (const KernelTime& k : be.profile())
      std::fprintf(stderr, "%-22s %8.3f s  %6ld calls\n", k.family.c_str(), k.seconds, k.calls);
  const double prefill_s = std::chrono::duration<double>(first - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - first).count();
  const double prefill_tps = batch * static_cast<double>(prompt_len) / prefill_s;
  const double decode_tps = batch * static_cast<double>(tokens - 1) / decode_s;
  if (json) {
    nlohmann::json j;
    j["backend"] = be.describe();
    j["model"] = loaded.description;
    j["batch"] = batch;
    j["prompt_len"] = prompt_len;
    j["tokens"] = tokens;
    j["threads"] = be.threads();
    j["dtype"] = dtype;
    j["cache"] = !no_cache;
    j["prefill_s"] = prefill_s;
    j["decode_s"] = decode_s;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n%s\nbatch %d, prompt %d, %d new tokens, %s%s\n", loaded.description.c_str(),
                be.describe().c_str(), batch, prompt_len, tokens, dtype.c_str(),
                no_cache ? ", no cache" : "");
    std::printf("prefill  %10.1f tokens/s  (%.3f s)\ndecode   %10.1f tokens/s  (%.3f s, %.2f ms per step)\n",
                prefill_tps, prefill_s, decode_tps, decode_s, 1000.0 * decode_s / (tokens - 1));
  }
  return 0;
}

}  // namespace flotilla::cli
