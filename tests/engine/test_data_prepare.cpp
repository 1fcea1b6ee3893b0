// data prepare: text and JSONL documents become <|endoftext|>-delimited token streams; the first
// val_fraction of the stream is the val split; shards are balanced and at most --shard-tokens;
// text files streamed in small blocks give exactly the ids of encoding them whole; old shards are
// never silently mixed in; malformed JSONL names the file and line.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"
#include "engine/data/prepare.h"
#include "engine/data/shard_map.h"
#include "engine/tokenizer/bpe.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

std::string sample_text(uint64_t seed, int lines) {
  const char* words[] = {"alpha", "beta", "gamma", "delta", "tea", "don't",
                         "we'll", "café", "x2",    "42",    "(ok)"};
  Rng rng(seed);
  std::string out;
  for (int l = 0; l < lines; ++l) {
    const int n = 1 + static_cast<int>(rng.below(12));
    if (rng.below(7) == 0) out += "  ";  // some lines start with spaces: not a safe cut
    for (int w = 0; w < n; ++w) out += std::string(w ? " " : "") + words[rng.below(11)];
    out += rng.below(9) == 0 ? "\n\n" : rng.below(9) == 0 ? " \n" : "\n";
  }
  return out;
}

std::vector<uint32_t> read_all(const std::vector<std::string>& files) {
  std::vector<uint32_t> out;
  for (const std::string& f : files) {
    MappedShard m(f);
    for (int64_t i = 0; i < m.size(); ++i) out.push_back(m.token(i));
  }
  return out;
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("data_prepare");
  const std::string text_a = sample_text(1, 3000);  // ~60 KB
  const Tokenizer tok = Tokenizer::train({text_a}, 300);
  const uint32_t eot = tok.eot_id();

  data_test::write_bytes(dir + "/a.txt", text_a);
  data_test::write_bytes(dir + "/b.jsonl",
                         "{\"text\": \"first doc\", \"id\": 1}\n\n{\"text\": \"Zweites Dokument: Grüße\"}\r\n"
                         "{\"text\": \"\"}\n");
  data_test::write_bytes(dir + "/c.jsonl", "{\"body\": \"custom field\"}\n");

  // Reference stream: EOT before every document, files in the order given.
  std::vector<uint32_t> expect = {eot};
  const auto enc_a = tok.encode(text_a);
  expect.insert(expect.end(), enc_a.begin(), enc_a.end());
  for (const char* doc : {"first doc", "Zweites Dokument: Grüße", ""}) {
    expect.push_back(eot);
    const auto e = tok.encode(doc);
    expect.insert(expect.end(), e.begin(), e.end());
  }

  PrepareOptions opt;
  opt.inputs = {dir + "/a.txt", dir + "/b.jsonl"};
  opt.out_dir = dir + "/out";
  opt.val_fraction = 0.1;
  opt.shard_tokens = 4000;
  opt.block_bytes = 1000;  // many blocks: exercises the streaming cut
  const PrepareResult r = prepare_shards(tok, opt);
  const int64_t total = static_cast<int64_t>(expect.size());
  CHECK(r.documents == 4);
  CHECK(r.val_tokens == std::llround(0.1 * static_cast<double>(total)));
  CHECK(r.train_tokens + r.val_tokens == total);
  CHECK(r.token_bytes == 2);
  std::vector<std::string> files = r.val_files;
  files.insert(files.end(), r.train_files.begin(), r.train_files.end());
  CHECK_MSG(read_all(files) == expect,
            "val + train shards must hold [EOT] doc [EOT] doc ... in order (%zu tokens)", expect.size());
  CHECK(read_all(r.val_files).size() == static_cast<size_t>(r.val_tokens));
  // Balanced shards of at most shard_tokens tokens, named train_000.bin, ...
  CHECK(r.train_files.size() == static_cast<size_t>((r.train_tokens + 3999) / 4000));
  int64_t lo = INT64_MAX, hi = 0;
  for (const std::string& f : r.train_files) {
    const int64_t n = inspect_shard(f, tok.vocab_size(), true).num_tokens;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  CHECK(hi <= 4000 && hi - lo <= 1);
  CHECK(r.train_files.front() == opt.out_dir + "/train_000.bin" &&
        r.val_files.front() == opt.out_dir + "/val_000.bin");
  CHECK(expand_shards(opt.out_dir + "/train_*.bin").size() == r.train_files.size());

  // An output folder with shards is refused unless --force; --force removes stale ones.
  CHECK_THROWS(prepare_shards(tok, opt), "already holds shards");
  write_shard(opt.out_dir + "/train_099.bin", {1, 2, 3});
  opt.force = true;
  opt.val_fraction = 0;
  opt.shard_tokens = 100000000;
  const PrepareResult again = prepare_shards(tok, opt);
  CHECK(again.val_files.empty() && again.train_files.size() == 1);
  CHECK(!std::filesystem::exists(opt.out_dir + "/train_099.bin"));
  CHECK(!std::filesystem::exists(opt.out_dir + "/val_000.bin"));
  CHECK(read_all(again.train_files) == expect);
  CHECK(!std::filesystem::exists(opt.out_dir + "/.prepare.spool.tmp"));

  // JSONL: another text field; malformed lines name the file and the line.
  PrepareOptions j;
  j.out_dir = dir + "/out_j";
  j.inputs = {dir + "/c.jsonl"};
  CHECK_THROWS(prepare_shards(tok, j),
               "c.jsonl line 1: no string field \"text\"; name the text field with --text-field");
  j.text_field = "body";
  j.val_fraction = 0;
  const PrepareResult rj = prepare_shards(tok, j);
  CHECK(rj.documents == 1 && rj.train_tokens == 1 + static_cast<int64_t>(tok.encode("custom field").size()));
  data_test::write_bytes(dir + "/d.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  j.inputs = {dir + "/d.jsonl"};
  j.text_field = "text";
  j.force = true;
  CHECK_THROWS(prepare_shards(tok, j), "d.jsonl line 2: not valid JSON");
  j.inputs = {dir + "/missing.txt"};
  CHECK_THROWS(prepare_shards(tok, j), "cannot read");
  j.inputs = {dir + "/a.txt"};
  j.val_fraction = 1.5;
  CHECK_THROWS(prepare_shards(tok, j), "--val-fraction");

  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_prepare");
}
