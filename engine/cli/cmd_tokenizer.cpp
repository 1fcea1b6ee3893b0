// flotilla-worker tokenizer train|encode|decode: the byte-level BPE tokenizer from the shell.
//
// One non-obvious decision: `decode` writes the raw bytes to stdout with no added newline, so
// `encode | decode` round-trips a file byte for byte (including invalid UTF-8).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {

namespace {

void print_tokenizer_help() {
  std::printf(
      "Usage: flotilla-worker tokenizer <subcommand> [options]\n\n"
      "Subcommands:\n"
      "  train   train a byte-level BPE tokenizer on text files\n"
      "  encode  print the token ids of a text\n"
      "  decode  print the text of token ids\n\n"
      "A tokenizer is a folder holding a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3,\n"
      "Qwen, SmolLM2), or GPT-2's vocab.json + merges.txt, or a JSON file from 'tokenizer train'.\n"
      "Run 'flotilla-worker tokenizer <subcommand> --help' for options.\n");
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int tok_train(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker tokenizer train --input FILE... --vocab-size N --out TOK.json\n\n"
        "Trains byte-level BPE with GPT-2 pre-tokenization. Ids 0-255 are the bytes, merges follow,\n"
        "and the last id is <|endoftext|>. Deterministic: ties go to the smaller pair of ids.\n"
        "Stops early (a smaller vocabulary) when no pair occurs twice.\n\n"
        "  --input FILE     a training text file (repeat, or list several after it)\n"
        "  --vocab-size N   vocabulary size including the 256 bytes and <|endoftext|> (>= 257)\n"
        "  --out PATH       where to write the tokenizer JSON\n");
    return 0;
  }
  std::vector<std::string> inputs = args.values("--input");
  const auto out = args.value("--out");
  const auto vocab = args.value("--vocab-size");
  for (std::string& p : args.positionals()) inputs.push_back(std::move(p));
  args.finish("tokenizer train");
  if (inputs.empty()) throw_usage("tokenizer train: give at least one --input file");
  if (!vocab) throw_usage("tokenizer train: --vocab-size N is required");
  if (!out) throw_usage("tokenizer train: --out PATH is required");
  const long long n = parse_int(*vocab, "--vocab-size");
  if (n < 257 || n > (1 << 24)) throw_usage("tokenizer train: --vocab-size must be between 257 and 16777216");
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::train_files(inputs, static_cast<int>(n));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tok.save(*out);
  int64_t bytes = 0, tokens = 0;
  for (const std::string& p : inputs) {
    const std::string text = read_all(p);
    bytes += static_cast<int64_t>(text.size());
    tokens += static_cast<int64_t>(tok.encode(text).size());
  }
  std::printf("wrote %s: %d tokens (%zu merges, <|endoftext|> = %u) in %.2f s\n", out->c_str(),
              tok.vocab_size(), tok.merges().size(), tok.eot_id(), secs);
  if (tok.vocab_size() < n)
    std::printf("note: stopped at %d of %lld tokens: no pair occurs twice in the training text\n",
                tok.vocab_size(), n);
  std::printf("training text: %lld bytes -> %lld tokens (%.2f bytes/token)\n", static_cast<long long>(bytes),
              static_cast<long long>(tokens),
              tokens ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0);
  return 0;
}

int tok_encode(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker tokenizer encode --tokenizer TOK (--text T | --input FILE) "
        "[--allow-special]\n\n"
        "Prints the token ids, space-separated, on one line.\n\n"
        "  --tokenizer TOK   tokenizer.json folder, GPT-2 folder or tokenizer JSON\n"
        "  --text T          the text to encode\n"
        "  --input FILE      encode a file's bytes instead\n"
        "  --allow-special   turn special tokens in the text (\"<|endoftext|>\") into their ids (otherwise\n"
        "                    they are plain text; a tokenizer.json's non-special added tokens always "
        "match)\n");
    return 0;
  }
  const auto tok_path = args.value("--tokenizer");
  const auto text = args.value("--text");
  const auto input = args.value("--input");
  const bool special = args.flag("--allow-special");
  args.finish("tokenizer encode");
  if (!tok_path) throw_usage("tokenizer encode: --tokenizer is required");
  if (text.has_value() == input.has_value())
    throw_usage("tokenizer encode: give exactly one of --text or --input");
  const Tokenizer tok = Tokenizer::load(*tok_path);
  const std::vector<uint32_t> ids = tok.encode(text ? *text : read_all(*input), special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int tok_decode(Args& args) {
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker tokenizer decode --tokenizer TOK (--ids \"1 2 3\" | --input FILE)\n\n"
        "Writes the decoded bytes to stdout exactly (no newline added). Ids may be separated by\n"
        "spaces, commas or newlines.\n\n"
        "  --tokenizer TOK   tokenizer.json folder, GPT-2 folder or tokenizer JSON\n"
        "  --ids LIST        the ids\n"
        "  --input FILE      read the ids from a file (e.g. the output of encode)\n");
    return 0;
  }
  const auto tok_path = args.value("--tokenizer");
  const auto ids_text = args.value("--ids");
  const auto input = args.value("--input");
  args.finish("tokenizer decode");
  if (!tok_path) throw_usage("tokenizer decode: --tokenizer is required");
  if (ids_text.has_value() == input.has_value())
    throw_usage("tokenizer decode: give exactly one of --ids or --input");
  const std::string list = ids_text ? *ids_text : read_all(*input);
  std::vector<uint32_t> ids;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    const long long v = parse_int(word, "token id");
    if (v < 0 || v > UINT32_MAX) throw_usage("tokenizer decode: token id " + word + " is out of range");
    ids.push_back(static_cast<uint32_t>(v));
    word.clear();
  };
  for (char c : list) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r')
      flush();
    else
      word += c;
  }
  flush();
  const Tokenizer tok = Tokenizer::load(*tok_path);
  const std::string out = tok.decode(ids);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int cmd_tokenizer(const CommandArgs& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print_tokenizer_help();
    return argv.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  const std::string sub = argv[0];
  Args args(CommandArgs(argv.begin() + 1, argv.end()));
  if (sub == "train") return tok_train(args);
  if (sub == "encode") return tok_encode(args);
  if (sub == "decode") return tok_decode(args);
  throw_usage("tokenizer: unknown subcommand '" + sub +
              "' (train, encode, decode; see flotilla-worker tokenizer --help)");
}

}  // namespace flotilla::cli
