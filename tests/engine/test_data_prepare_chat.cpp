// data prepare --tokenizer DIR on fine-tuning JSONL, through the real worker binary: the golden
// conversations (tests/engine/golden/tokenizers/golden.json) written as chat records must give
// labeled shards whose tokens are exactly transformers' apply_chat_template ids, one document per
// conversation, with the loss flags of its assistant mask; then prompt/completion records, the val
// split and shards cut at document boundaries, --no-pack and --documents, `data inspect` on a
// labeled shard, and errors naming the file and line.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/data/chat_format.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "engine/data/prepare.h"
#include "engine/data/shard_map.h"
#include "engine/tokenizer/bpe.h"
#include "test_data_util.h"

using namespace flotilla;
using data_test::contains;
using data_test::run;
using nlohmann::json;

namespace {

struct Stream {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> flags;
};

Stream read_shards(const std::string& glob) {
  Stream s;
  for (const std::string& f : expand_shards(glob)) {
    const MappedShard m(f);
    CHECK(m.info().labeled);
    for (int64_t i = 0; i < m.size(); ++i) {
      s.ids.push_back(m.token(i));
      s.flags.push_back(m.flag(i));
    }
  }
  return s;
}

}  // namespace

int main() {
  const std::string w = FLOTILLA_WORKER_PATH;
  const std::string gold = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers";
  const json golden = json::parse(data_test::read_bytes(gold + "/golden.json"));
  const std::string dir = data_test::scratch("data_prepare_chat");
  std::string out;

  // The conversations as chat JSONL.
  std::string jsonl;
  for (const json& conv : golden.at("conversations")) jsonl += json{{"messages", conv}}.dump() + "\n";
  data_test::write_bytes(dir + "/chat.jsonl", jsonl);

  // Each tokenizer with its default format: the shard stream is the golden renderings, in order.
  int exact = 0;
  for (const auto& [name, format] :
       {std::pair{"llama3", "llama3"}, {"qwen", "qwen3"}, {"smollm2", "chatml"}}) {
    const std::string o = dir + "/" + name;
    const int rc = run(w + " data prepare --input " + dir + "/chat.jsonl --tokenizer " + gold + "/" + name +
                           " --out " + o + " --val-fraction 0 --seq-len 64",
                       &out);
    CHECK_MSG(rc == 0 && contains(out, std::string("chat format  ") + format) && contains(out, "labeled") &&
                  contains(out, "rows at T=64"),
              "%s: rc %d\n%s", name, rc, out.c_str());
    Stream want;
    for (const json& c : golden.at("chat")) {
      if (c.at("tokenizer") != name || c.at("format") != format) continue;
      const auto ids = c.at("ids").get<std::vector<uint32_t>>();
      const auto targets = c.at("targets").get<std::vector<int>>();
      for (size_t k = 0; k < ids.size(); ++k) {
        want.ids.push_back(ids[k]);
        want.flags.push_back(static_cast<uint8_t>(k == 0 ? kFlagDocStart : targets[k] ? kFlagTarget : 0));
      }
    }
    const Stream got = read_shards(o + "/train_*.bin");
    CHECK_MSG(got.ids == want.ids, "%s: shard ids == apply_chat_template ids (%zu vs %zu)", name,
              got.ids.size(), want.ids.size());
    CHECK_MSG(got.flags == want.flags, "%s: shard flags == assistant masks + document starts", name);
    exact += got.ids == want.ids && got.flags == want.flags;
  }
  std::printf("data prepare: %d/3 tokenizers give exactly the apply_chat_template ids and masks\n", exact);

  // An explicit format, and a format the tokenizer cannot render.
  CHECK(run(w + " data prepare --input " + dir + "/chat.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/qwen_chatml --val-fraction 0 --chat-format chatml",
            &out) == 0 &&
        contains(out, "chat format  chatml"));
  CHECK(run(w + " data prepare --input " + dir + "/chat.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/bad --chat-format llama3",
            &out) == 4 &&
        contains(out, "chat.jsonl line 1: chat format llama3 needs the token <|start_header_id|>"));
  CHECK(run(w + " data prepare --input " + dir + "/chat.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/bad --chat-format vicuna",
            &out) == 2 &&
        contains(out, "--chat-format vicuna is not one of"));
  data_test::write_bytes(
      dir + "/broken.jsonl",
      "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"messages\": [{\"role\": \"user\"}]}\n");
  CHECK(run(w + " data prepare --input " + dir + "/broken.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/bad",
            &out) == 4 &&
        contains(out, "broken.jsonl line 2: messages[0].content is missing"));

  // Prompt/completion records (library): plain format, val split at a document boundary, shards
  // cut at document boundaries, rows for T.
  const Tokenizer qwen = Tokenizer::load(gold + "/qwen");
  std::string pc;
  for (int i = 0; i < 40; ++i)
    pc += json{{"prompt", "Question " + std::to_string(i) + ": what is " + std::to_string(i) + "+1?\n"},
               {"completion", "Answer: " + std::to_string(i + 1) + "."}}
              .dump() +
          "\n";
  data_test::write_bytes(dir + "/pc.jsonl", pc);
  PrepareOptions opt;
  opt.inputs = {dir + "/pc.jsonl"};
  opt.out_dir = dir + "/pc";
  opt.val_fraction = 0.1;
  opt.shard_tokens = 200;
  opt.seq_len = 128;
  const PrepareResult r = prepare_shards(qwen, opt);
  CHECK(r.labeled && r.completion_records == 40 && r.documents == 40 && r.chat_format.empty());
  CHECK(r.val_documents >= 4 && r.val_documents + r.train_documents == 40);
  CHECK(r.train_files.size() > 1);
  int64_t docs = 0, targets = 0;
  for (const std::string& f : r.train_files) {
    const MappedShard m(f);
    CHECK(m.size() <= 200 + 40 && (m.flag(0) & kFlagDocStart));  // each shard starts a document
    docs += m.info().documents;
    targets += m.info().targets;
  }
  CHECK(docs == r.train_documents && targets == r.train_targets);
  DataLoader loader([&] {
    LoaderOptions lo;
    lo.pattern = opt.out_dir + "/train_*.bin";
    lo.B = 1;
    lo.T = 128;
    return lo;
  }());
  CHECK_MSG(loader.labeled_rows() == r.train_rows, "rows: loader %lld, prepare %lld",
            static_cast<long long>(loader.labeled_rows()), static_cast<long long>(r.train_rows));
  // Every target of the first record decodes to the completion and EOS.
  {
    const Stream s = read_shards(r.val_files.front());
    std::string target_text;
    for (size_t k = 0; k < s.ids.size() && (k == 0 || !(s.flags[k] & kFlagDocStart)); ++k)
      if (s.flags[k] & kFlagTarget) target_text += qwen.token_bytes(s.ids[k]);
    CHECK_MSG(target_text == "Answer: 1.<|im_end|>", "%s", target_text.c_str());
  }
  // Issue 34 item 2: a validation split of N rows (one batch) instead of a fraction: the fewest
  // leading documents that the loader packs into N rows at T, so a batch of N rows loads from it.
  for (const int want_rows : {1, 3, 5}) {
    PrepareOptions v = opt;
    v.out_dir = dir + "/pc_val" + std::to_string(want_rows);
    v.val_rows = want_rows;
    v.seq_len = 32;
    const PrepareResult vr = prepare_shards(qwen, v);
    CHECK_MSG(vr.val_rows >= want_rows, "val rows %lld < %d", static_cast<long long>(vr.val_rows), want_rows);
    LoaderOptions lo;
    lo.pattern = v.out_dir + "/val_*.bin";
    lo.B = want_rows;
    lo.T = 32;
    CHECK(DataLoader(lo).batches_per_epoch() >= 1);  // one batch of want_rows rows fits
    // One document fewer would not fill them: the fewest.
    std::vector<int64_t> starts;
    int64_t total = 0;
    for (const std::string& f : vr.val_files) {
      const MappedShard m(f);
      for (int64_t i = 0; i < m.size(); ++i)
        if (m.flag(i) & kFlagDocStart) starts.push_back(total + i);
      total += m.size();
    }
    CHECK(static_cast<int64_t>(starts.size()) == vr.val_documents);
    const int64_t last_start = starts.back();
    starts.pop_back();
    CHECK(plan_rows(starts, last_start, 32, true).rows() < want_rows);
  }
  {
    PrepareOptions v = opt;
    v.out_dir = dir + "/pc_val_too_many";
    v.val_rows = 100000;
    v.seq_len = 32;
    bool threw = false;
    try {
      prepare_shards(qwen, v);
    } catch (const std::exception& e) {
      threw = contains(e.what(), "fewer than 100,000 validation rows") && contains(e.what(), "no validation");
    }
    CHECK(threw);
  }
  CHECK(run(w + " data prepare --input " + dir + "/pc.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/pc_cli_rows --seq-len 32 --val-rows 4",
            &out) == 0);
  {
    LoaderOptions lo;
    lo.pattern = dir + "/pc_cli_rows/val_*.bin";
    lo.B = 4;
    lo.T = 32;
    CHECK(DataLoader(lo).batches_per_epoch() >= 1);
  }
  CHECK(run(w + " data prepare --input " + dir + "/pc.jsonl --tokenizer " + gold + "/qwen --out " + dir +
                "/pc_cli_rows2 --val-rows 4",
            &out) == 2 &&
        contains(out, "give --seq-len too"));

  // --no-pack: one document per row; --documents: labeled shards for text too.
  opt.out_dir = dir + "/pc_rows";
  opt.pack = false;
  const PrepareResult rows = prepare_shards(qwen, opt);
  CHECK(rows.split_documents == 0 && rows.train_rows == rows.train_documents);  // short records: one row each
  CHECK(r.train_rows < rows.train_rows);                                        // packing needs fewer
  CHECK(!MappedShard(rows.train_files.front()).info().pack);
  data_test::write_bytes(dir + "/a.txt", "first text file\n");
  data_test::write_bytes(dir + "/b.txt", "second text file\n");
  PrepareOptions text;
  text.inputs = {dir + "/a.txt", dir + "/b.txt"};
  text.out_dir = dir + "/text";
  text.val_fraction = 0;
  const PrepareResult plain = prepare_shards(qwen, text);
  CHECK(!plain.labeled && plain.text_records == 2);
  CHECK(!inspect_shard(plain.train_files.front()).labeled);
  text.documents = true;
  text.out_dir = dir + "/text_docs";
  const PrepareResult docs_r = prepare_shards(qwen, text);
  CHECK(docs_r.labeled && docs_r.train_documents == 2 && docs_r.train_tokens == plain.train_tokens);
  CHECK(docs_r.train_targets == docs_r.train_tokens - 2);  // everything but the two document starts

  // Text files with a tokenizer.json, read in 1,000-byte blocks cut at safe newlines (or whole,
  // for a tokenizer whose added tokens strip white space): the ids of append_text_document on the
  // whole file, i.e. tokenizer(text) + EOS.
  std::string long_text;
  for (const json& t : golden.at("texts")) long_text += t.at("text").get<std::string>() + "\n";
  data_test::write_bytes(dir + "/long.txt", long_text);
  for (const char* name : {"gpt2", "llama3", "qwen", "smollm2"}) {
    const Tokenizer tok = Tokenizer::load(gold + "/" + name);
    PrepareOptions lo;
    lo.inputs = {dir + "/long.txt"};
    lo.out_dir = dir + "/long_" + name;
    lo.val_fraction = 0;
    lo.block_bytes = 1000;
    const PrepareResult lr = prepare_shards(tok, lo);
    std::vector<uint32_t> want, got;
    append_text_document(tok, long_text, want);
    const MappedShard m(lr.train_files.front());
    for (int64_t i = 0; i < m.size(); ++i) got.push_back(m.token(i));
    CHECK_MSG(got == want, "%s: streamed text ids == whole-text ids (%zu vs %zu; cut in blocks: %d)", name,
              got.size(), want.size(), tok.can_cut_at_newlines() ? 1 : 0);
    CHECK(got.back() == tok.eot_id());
  }

  // data inspect on a labeled shard.
  CHECK(run(w + " data inspect " + r.train_files.front() + " --seq-len 48 --check-vocab " +
                std::to_string(qwen.vocab_size()),
            &out) == 0);
  CHECK(contains(out, "magic 20251201, version 1 (labeled, uint16 tokens)") &&
        contains(out, "+ 1 flag byte") && contains(out, "documents ") && contains(out, "targets ") &&
        contains(out, "rows at T=48") && contains(out, "several documents per row"));
  CHECK(run(w + " data prepare --help", &out) == 0 && contains(out, "--chat-format") &&
        contains(out, "--no-pack"));

  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_prepare_chat");
}
