// flotilla-worker data synth|prepare|inspect: make and check token shards (llm.c's and labeled).
//
// One non-obvious decision: `inspect` validates every matched shard and reports all of them
// before failing (exit code 4), so one command lists every damaged file of a dataset instead of
// stopping at the first.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "engine/data/prepare.h"
#include "engine/data/shard_map.h"
#include "engine/data/synthetic.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {

namespace {

void print_data_help() {
  std::printf(
      "Usage: flotilla-worker data <subcommand> [options]\n\n"
      "Subcommands:\n"
      "  synth    write a deterministic synthetic corpus (train_000.bin, val_000.bin)\n"
      "  prepare  tokenize text, prompt/completion or chat JSONL into train_NNN.bin / val_NNN.bin shards\n"
      "  inspect  print a shard's header and token statistics and validate it\n\n"
      "Run 'flotilla-worker data <subcommand> --help' for options. Formats: docs/data.md.\n");
}

int data_synth(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker data synth --out DIR [--vocab N] [--tokens N] [--val-tokens N] [--seed S]\n\n"
        "Writes DIR/train_000.bin and DIR/val_000.bin: a word-level Markov chain over a random\n"
        "partition of the vocabulary (docs/data.md \"Synthetic corpus\"), with its exact entropy rate\n"
        "(the lowest loss any model can reach). Same arguments, byte-identical files.\n\n"
        "  --out DIR         output directory (created)\n"
        "  --vocab N         vocabulary size (default 512)\n"
        "  --tokens N        train tokens (default 2000000)\n"
        "  --val-tokens N    val tokens (default tokens / 10; 0 writes no val shard)\n"
        "  --seed S          seed (default 1337)\n");
    return 0;
  }
  const auto out = args.value("--out");
  const long long vocab = args.int_or("--vocab", 512);
  const long long tokens = args.int_or("--tokens", 2000000);
  const long long val_tokens = args.int_or("--val-tokens", tokens / 10);
  const long long seed = args.int_or("--seed", 1337);
  args.finish("data synth");
  if (!out) throw_usage("data synth: --out DIR is required");
  if (vocab < 8 || vocab > (1 << 24)) throw_usage("data synth: --vocab must be between 8 and 16777216");
  if (tokens < 2 || val_tokens < 0) throw_usage("data synth: --tokens must be >= 2 and --val-tokens >= 0");
  const auto t0 = std::chrono::steady_clock::now();
  write_synthetic_corpus(*out, static_cast<int>(vocab), tokens, val_tokens, static_cast<uint64_t>(seed));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const SyntheticStats s = synthetic_stats(static_cast<int>(vocab), static_cast<uint64_t>(seed));
  std::printf("wrote %s/train_000.bin (%s tokens)", out->c_str(), group_digits(tokens).c_str());
  if (val_tokens > 0)
    std::printf(" and %s/val_000.bin (%s tokens)", out->c_str(), group_digits(val_tokens).c_str());
  std::printf(" in %.2f s\n", secs);
  std::printf("vocab %d in %d words (mean length %.2f tokens)\n", s.vocab_size, s.num_words,
              s.mean_word_length);
  std::printf("loss reference (nats/token): untrained ln(V) = %.3f, unigram = %.3f, best possible = %.3f\n",
              s.uniform_entropy, s.unigram_entropy, s.entropy_rate);
  return 0;
}

std::vector<std::string> inputs_of(Args& args) {
  std::vector<std::string> inputs = args.values("--input");
  for (std::string& p : args.positionals()) inputs.push_back(std::move(p));
  return inputs;
}

int data_prepare(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker data prepare --input FILE... --tokenizer TOK --out DIR [options]\n\n"
        "Tokenizes documents into shards DIR/val_NNN.bin and DIR/train_NNN.bin. A .jsonl (or\n"
        ".ndjson) file holds one record per line: {\"text\": ...} (a document), {\"prompt\": ...,\n"
        "\"completion\": ...} or {\"messages\": [{\"role\": \"system|user|assistant\", \"content\": ...}]};\n"
        "any other file is one document. Text only: llm.c shards (each document preceded by\n"
        "<|endoftext|>, or tokenizer(text) + EOS with a tokenizer.json), the first --val-fraction of\n"
        "the tokens for validation. Prompt/completion or chat records: labeled shards with the loss\n"
        "on the completion / assistant tokens only, split at document boundaries, packed into rows\n"
        "of --seq-len by the loader (docs/data.md \"Fine-tuning data\").\n\n"
        "  --input FILE        input file (repeat, or list several files after it)\n"
        "  --tokenizer TOK     a folder with tokenizer.json (Hugging Face), or with GPT-2's vocab.json +\n"
        "                      merges.txt, or a tokenizer JSON from 'tokenizer train', or a Hub name\n"
        "                      org/name[@revision] (its tokenizer from the Hugging Face cache;\n"
        "                      its tokenizer files alone downloaded when missing)\n"
        "  --out DIR           output directory (created)\n"
        "  --chat-format F     llama3, chatml, qwen3 or plain (default: chat records use the tokenizer's\n"
        "                      family, prompt/completion records plain)\n"
        "  --seq-len T         count the rows (sequences of T tokens) the data gives for training at T\n"
        "  --no-pack           labeled shards: one document per row instead of packing several\n"
        "  --documents         labeled shards even for text (packing keeps documents apart)\n"
        "  --text-field NAME   JSONL field holding the text (default text)\n"
        "  --val-fraction F    fraction of tokens for validation (default 0.01; 0 = none)\n"
        "  --val-rows N        instead: the fewest leading documents that fill N rows at --seq-len\n"
        "                      (N = ranks x micro-batch: one validation batch)\n"
        "  --shard-tokens N    most tokens per shard (default 100000000)\n"
        "  --force             replace train_*.bin / val_*.bin already in DIR\n");
    return 0;
  }
  PrepareOptions opt;
  const auto tok_path = args.value("--tokenizer");
  const auto out = args.value("--out");
  opt.text_field = args.value_or("--text-field", "text");
  opt.val_fraction = args.double_or("--val-fraction", 0.01);
  opt.val_rows = args.int_or("--val-rows", 0);
  opt.shard_tokens = args.int_or("--shard-tokens", 100000000);
  opt.chat_format = args.value_or("--chat-format", "");
  const long long seq_len = args.int_or("--seq-len", 0);
  opt.pack = !args.flag("--no-pack");
  opt.documents = args.flag("--documents");
  opt.force = args.flag("--force");
  opt.inputs = inputs_of(args);
  args.finish("data prepare");
  if (!tok_path)
    throw_usage(
        "data prepare: --tokenizer is required (a tokenizer.json folder, a GPT-2 folder, a tokenizer "
        "JSON or a Hub name org/name)");
  if (!out) throw_usage("data prepare: --out DIR is required");
  if (seq_len < 0 || seq_len > (1 << 24))
    throw_usage("data prepare: --seq-len must be between 1 and 16777216");
  opt.seq_len = static_cast<int>(seq_len);
  opt.out_dir = *out;
  const Tokenizer tok = Tokenizer::load(*tok_path);
  std::string named;
  for (const auto& [what, id] :
       {std::pair{"bos", tok.bos_id()}, {"eos", tok.eos_id()}, {"pad", tok.pad_id()}})
    if (id) named += std::string(", ") + what + " " + std::to_string(*id);
  std::fprintf(stderr, "tokenizer %s: %s, %d tokens%s\n", tok_path->c_str(), tok.origin().c_str(),
               tok.vocab_size(), named.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const PrepareResult r =
      prepare_shards(tok, opt, [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("documents    %s (text %s, prompt/completion %s, chat %s)\n", group_digits(r.documents).c_str(),
              group_digits(r.text_records).c_str(), group_digits(r.completion_records).c_str(),
              group_digits(r.chat_records).c_str());
  if (!r.chat_format.empty()) std::printf("chat format  %s\n", r.chat_format.c_str());
  std::printf("shards       %s\n",
              r.labeled ? (opt.pack ? "labeled (loss targets + document starts), packed"
                                    : "labeled (loss targets + document starts), one document per row")
                        : "llm.c (tokens only)");
  std::printf("train tokens %s in %zu shard(s)", group_digits(r.train_tokens).c_str(), r.train_files.size());
  if (r.labeled)
    std::printf(", %s documents, %s targets (%.1f%%)", group_digits(r.train_documents).c_str(),
                group_digits(r.train_targets).c_str(),
                r.train_tokens
                    ? 100.0 * static_cast<double>(r.train_targets) / static_cast<double>(r.train_tokens)
                    : 0.0);
  std::printf("\nval tokens   %s in %zu shard(s)", group_digits(r.val_tokens).c_str(), r.val_files.size());
  if (r.labeled)
    std::printf(", %s documents, %s targets", group_digits(r.val_documents).c_str(),
                group_digits(r.val_targets).c_str());
  std::printf("\n");
  if (opt.seq_len > 0) {
    std::printf("rows at T=%d  train %s, val %s%s\n", opt.seq_len, group_digits(r.train_rows).c_str(),
                group_digits(r.val_rows).c_str(), r.labeled ? "" : " (llm.c windows of T + 1 tokens)");
    if (r.split_documents > 0)
      std::printf("long docs    %s document(s) longer than a row are cut into pieces of T + 1 tokens\n",
                  group_digits(r.split_documents).c_str());
  }
  std::printf("token width  %d bytes (%s)\n", r.token_bytes, r.token_bytes == 2 ? "uint16" : "uint32");
  for (const auto& f : r.val_files) std::printf("  %s\n", f.c_str());
  for (const auto& f : r.train_files) std::printf("  %s\n", f.c_str());
  std::printf("time         %.2f s\n", secs);
  return 0;
}

void print_stats(const MappedShard& shard, int top_k) {
  const int64_t n = shard.size();
  if (n == 0) {
    std::printf("  range        (no tokens)\n");
    return;
  }
  uint32_t lo = UINT32_MAX, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t t = shard.token(i);
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  std::printf("  range        min %u, max %u\n", lo, hi);
  constexpr uint32_t kMaxCounted = 1u << 24;
  if (hi >= kMaxCounted) {
    std::printf("  histogram    (not computed: ids reach %u)\n", hi);
    return;
  }
  std::vector<int64_t> counts(static_cast<size_t>(hi) + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++counts[shard.token(i)];
  int64_t distinct = 0;
  double entropy = 0;
  for (int64_t c : counts) {
    if (!c) continue;
    ++distinct;
    const double p = static_cast<double>(c) / static_cast<double>(n);
    entropy -= p * std::log(p);
  }
  std::printf("  distinct     %s ids; unigram entropy %.3f nats\n", group_digits(distinct).c_str(), entropy);
  std::vector<uint32_t> order;
  for (uint32_t t = 0; t <= hi; ++t)
    if (counts[t]) order.push_back(t);
  const size_t k = std::min(order.size(), static_cast<size_t>(top_k));
  std::partial_sort(
      order.begin(), order.begin() + static_cast<long>(k), order.end(),
      [&](uint32_t a, uint32_t b) { return counts[a] != counts[b] ? counts[a] > counts[b] : a < b; });
  std::printf("  top ids     ");
  for (size_t i = 0; i < k; ++i)
    std::printf(" %u (%.1f%%)", order[i],
                100.0 * static_cast<double>(counts[order[i]]) / static_cast<double>(n));
  std::printf("\n  histogram   ");
  constexpr int kBuckets = 8;
  const uint64_t width = (static_cast<uint64_t>(hi) + kBuckets) / kBuckets;
  for (int b = 0; b < kBuckets; ++b) {
    int64_t c = 0;
    for (uint64_t t = b * width; t < std::min<uint64_t>((b + 1) * width, hi + 1ull); ++t) c += counts[t];
    std::printf(" [%llu,%llu) %.1f%%", static_cast<unsigned long long>(b * width),
                static_cast<unsigned long long>((b + 1) * width),
                100.0 * static_cast<double>(c) / static_cast<double>(n));
  }
  std::printf("\n");
}

// Labeled shards: documents, targets, packing mode, pad id, document lengths, and the rows at T.
void print_labels(const MappedShard& shard, int seq_len) {
  const ShardInfo& info = shard.info();
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < shard.size(); ++i)
    if (shard.flag(i) & kFlagDocStart) starts.push_back(i);
  int64_t longest = 0;
  for (size_t d = 0; d < starts.size(); ++d)
    longest = std::max(longest, (d + 1 < starts.size() ? starts[d + 1] : shard.size()) - starts[d]);
  std::printf("  documents    %s (mean %.1f tokens, longest %s)\n", group_digits(info.documents).c_str(),
              starts.empty() ? 0.0 : static_cast<double>(shard.size()) / static_cast<double>(starts.size()),
              group_digits(longest).c_str());
  std::printf(
      "  targets      %s (%.1f%% of tokens carry loss)\n", group_digits(info.targets).c_str(),
      shard.size() ? 100.0 * static_cast<double>(info.targets) / static_cast<double>(shard.size()) : 0.0);
  std::printf("  packing      %s, pad id %u\n",
              info.pack ? "several documents per row" : "one document per row", info.pad_id);
  if (seq_len > 0) {
    const PackPlan plan = plan_rows(starts, shard.size(), seq_len, info.pack);
    std::printf("  rows at T=%d %s (%s documents cut into pieces, %.1f%% padding)\n", seq_len,
                group_digits(plan.rows()).c_str(), group_digits(plan.split_documents).c_str(),
                plan.rows() ? 100.0 * static_cast<double>(plan.padding) /
                                  (static_cast<double>(plan.rows()) * (seq_len + 1))
                            : 0.0);
  }
}

int data_inspect(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker data inspect FILE|GLOB... [--check-vocab N] [--top K] [--seq-len T]\n\n"
        "For each shard: header fields, token count and width, min/max id, distinct ids, the most\n"
        "frequent ids, a histogram over the id range, and the validation result (magic, version,\n"
        "file size = 1,024 + width x count; with --check-vocab, every id < N). Exits with code 4\n"
        "when any shard fails validation, after reporting all of them. Quote globs.\n\n"
        "  --check-vocab N   also require every token id < N\n"
        "  --top K           how many frequent ids to list (default 5)\n"
        "  --seq-len T       labeled shards: the rows (sequences) the loader packs them into at T\n");
    return 0;
  }
  const long long vocab = args.int_or("--check-vocab", 0);
  const long long top = args.int_or("--top", 5);
  const long long seq_len = args.int_or("--seq-len", 0);
  std::vector<std::string> patterns = args.positionals();
  args.finish("data inspect");
  if (patterns.empty()) throw_usage("data inspect: give a shard file or a quoted glob");
  if (vocab < 0 || vocab > INT32_MAX)
    throw_usage("data inspect: --check-vocab must be a positive vocabulary size");
  int failed = 0, total = 0;
  std::string first_error;
  for (const std::string& pattern : patterns) {
    for (const std::string& path : expand_shards(pattern)) {
      ++total;
      std::printf("shard %s\n", path.c_str());
      try {
        const ShardInfo info = inspect_shard(path, static_cast<int>(vocab), vocab > 0);
        std::printf("  header       magic %d, version %d (%s%s tokens)\n", info.magic, info.version,
                    info.labeled ? "labeled, " : "", info.token_bytes == 2 ? "uint16" : "uint32");
        const int per_token = info.token_bytes + (info.labeled ? 1 : 0);
        std::printf("  tokens       %s (%d bytes each%s, file %s bytes)\n",
                    group_digits(info.num_tokens).c_str(), info.token_bytes,
                    info.labeled ? " + 1 flag byte" : "",
                    group_digits(kShardHeaderBytes + info.num_tokens * per_token).c_str());
        const MappedShard shard(path);
        if (info.labeled) print_labels(shard, static_cast<int>(seq_len));
        print_stats(shard, static_cast<int>(top));
        if (vocab > 0)
          std::printf("  validation   ok (header, size, every id < %s)\n", group_digits(vocab).c_str());
        else
          std::printf("  validation   ok (header and size; --check-vocab N also checks ids)\n");
      } catch (const Error& e) {
        ++failed;
        if (first_error.empty()) first_error = e.what();
        std::printf("  validation   FAILED: %s\n", e.what());
      }
    }
  }
  std::fflush(stdout);
  if (failed > 0)
    throw_data(std::to_string(failed) + " of " + std::to_string(total) +
               " shard(s) failed validation; first: " + first_error);
  return 0;
}

}  // namespace

int cmd_data(const CommandArgs& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print_data_help();
    return argv.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  const std::string sub = argv[0];
  Args args(CommandArgs(argv.begin() + 1, argv.end()));
  if (sub == "synth") return data_synth(args);
  if (sub == "prepare") return data_prepare(args);
  if (sub == "inspect") return data_inspect(args);
  throw_usage("data: unknown subcommand '" + sub +
              "' (synth, prepare, inspect; see flotilla-worker data --help)");
}

}  // namespace flotilla::cli
