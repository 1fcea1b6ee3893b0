// tokenizer.json files: every refusal names the file and the JSON path (missing model, model types
// other than BPE, bad merges, bad regexes, unsupported normalizers / pre-tokenizers / decoders,
// tokenizer_config.json tokens that do not exist); Tokenizer::load picks tokenizer.json, else
// vocab.json + merges.txt, else tokenizer.flotilla.json in a folder; added-token ids follow the
// library when a file's ids disagree; and the GPT-2 vocab.json path, fed the GPT-2-style golden
// tokenizer's vocabulary and merges, still gives the library's ids.
#include <sys/resource.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/tokenizer/bpe.h"
#include "test_data_util.h"

using namespace flotilla;
using nlohmann::json;

namespace {

const std::string kGold = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers";

json golden_json(const char* name) {
  return json::parse(data_test::read_bytes(kGold + "/" + name + "/tokenizer.json"));
}

Tokenizer from(const json& j) { return Tokenizer::from_hf_json(j.dump(), "/x/tokenizer.json"); }

void test_errors() {
  const json base = golden_json("llama3");
  CHECK(from(base).vocab_size() == 916);
  json j = base;
  j.erase("model");
  CHECK_THROWS(from(j), "tokenizer.json /x/tokenizer.json: \"model\" is missing");
  j = base;
  j["model"]["type"] = "Unigram";
  CHECK_THROWS(from(j), "model.type \"Unigram\" is not supported (byte-level BPE only)");
  j = base;
  j["model"]["merges"][3] = "Ġ";
  CHECK_THROWS(from(j), "model.merges[3] \"Ġ\" must be two tokens separated by one space");
  j = base;
  j["model"]["merges"][5] = json::array({"Ġ", "nosuchtoken"});
  CHECK_THROWS(from(j), "model.merges[5] names \"nosuchtoken\", which is not in model.vocab");
  j = base;
  j["model"]["merges"][7] = 42;
  CHECK_THROWS(from(j), "model.merges[7] 42 must be \"A B\" or [\"A\", \"B\"]");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?i:'s|'t";
  CHECK_THROWS(from(j), "pre_tokenizer.pretokenizers[0].pattern.Regex: cannot compile the regex (?i:'s|'t");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,3}+";
  CHECK_THROWS(from(j),
               "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex \\p{N}{1,3}+ uses an interval");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Split";
  CHECK_THROWS(from(j), "pre_tokenizer.pretokenizers[0].behavior \"Split\" is not one of Removed, Isolated");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  CHECK_THROWS(from(j), "pre_tokenizer.pretokenizers[1].type \"Metaspace\" is not supported");
  j = base;
  j["pre_tokenizer"]["pretokenizers"] =
      json::array({base["pre_tokenizer"]["pretokenizers"][1], base["pre_tokenizer"]["pretokenizers"][0]});
  CHECK_THROWS(from(j), "pre_tokenizer.pretokenizers[1] follows the ByteLevel step");
  j = base;
  j["pre_tokenizer"] = base["pre_tokenizer"]["pretokenizers"][0];
  CHECK_THROWS(from(j), "pre_tokenizer has no ByteLevel step");
  j = base;
  j["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THROWS(from(j), "normalizer.type \"Lowercase\" is not supported (NFC, a Sequence of NFC, or none)");
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "NFKC"}}})}};
  CHECK_THROWS(from(j), "normalizer.normalizers[1].type \"NFKC\" is not supported");
  j = base;
  j["decoder"] = nullptr;
  CHECK_THROWS(from(j), "decoder is missing: byte-level BPE needs the ByteLevel decoder");
  j = base;
  j["model"]["byte_fallback"] = true;
  CHECK_THROWS(from(j), "model.byte_fallback true is not supported");
  j = base;
  j["model"]["dropout"] = 0.1;
  CHECK_THROWS(from(j), "model.dropout 0.1 is not supported");
  j = base;
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  CHECK_THROWS(from(j), "post_processor.type \"RobertaProcessing\" is not supported");
  j = base;
  j["model"]["vocab"].erase("Ā");  // byte 0's token
  for (auto& m : j["model"]["merges"])
    if (m.dump().find("Ā") != std::string::npos) m = json::array({"Ġ", "t"});
  CHECK_THROWS(from(j), "model.vocab has no token for byte 0");
  CHECK_THROWS(Tokenizer::from_hf_json("{not json", "/x/tokenizer.json"),
               "/x/tokenizer.json: not valid JSON");
  CHECK_THROWS(Tokenizer::from_hf_json(base.dump(), "/x/tokenizer.json", "{\"eos_token\": \"<|nope|>\"}",
                                       "/x/tokenizer_config.json"),
               "tokenizer_config.json /x/tokenizer_config.json: eos_token \"<|nope|>\" is not a token");
  CHECK_THROWS(
      Tokenizer::from_hf_json(base.dump(), "/x/tokenizer.json",
                              R"({"added_tokens_decoder": {"916": {"content": "<|extra|>"}}})", "/x/c.json"),
      "added_tokens_decoder[\"916\"] \"<|extra|>\" is not in tokenizer.json (transformers would add it)");
  CHECK(Tokenizer::from_hf_json(base.dump(), "/x/tokenizer.json",
                                R"({"added_tokens_decoder": {"915": {"content": "<|eot_id|>"}}})",
                                "/x/c.json")
            .vocab_size() == 916);
  // RELIABILITY A9: an id far beyond the vocabulary is refused before the id-indexed table is sized
  // by it (one id of 2^26 in a 19 KB file took 2.2 GB); sparse ids within the slack still load.
  for (const uint64_t id : {uint64_t{1} << 26, uint64_t{2147483647}, uint64_t{1} << 40}) {
    j = base;
    j["model"]["vocab"]["xyz-far"] = id;
    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    const std::string want = "model.vocab token \"xyz-far\" has id " + std::to_string(id) +
                             ", far beyond the vocabulary's 907 entries (ids must be below 67350)";
    CHECK_THROWS(from(j), want.c_str());
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    CHECK_MSG(after.ru_maxrss - before.ru_maxrss < 64 * 1024, "loading grew the peak RSS by %ld KiB",
              after.ru_maxrss - before.ru_maxrss);
  }
  j = base;
  j["model"]["vocab"]["xyz-sparse"] = 5000;
  j.erase("post_processor");  // its ids name the added tokens, which the extra entry renumbers
  CHECK(from(j).vocab_size() == 5001);
  // A tokenizer.json cannot be written in our format.
  CHECK_THROWS(from(base).to_json(), "cannot be written in Flotilla's format");
}

void test_added_ids_follow_the_library() {
  // The library assigns ids to added tokens that are not in the vocabulary in file order from the
  // vocabulary's size, whatever ids the file writes.
  json j = golden_json("llama3");
  for (auto& t : j["added_tokens"]) t["id"] = t["id"].get<int>() + 1000;
  const Tokenizer tok = from(j);
  CHECK(*tok.token_id("<|begin_of_text|>") == 906 && *tok.token_id("<|eot_id|>") == 915);
}

void test_folder_choice(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string both = dir + "/both";
  fs::create_directories(both);
  fs::copy_file(kGold + "/llama3/tokenizer.json", both + "/tokenizer.json");
  // A GPT-2 pair next to it loses: tokenizer.json comes first.
  const json gpt2 = golden_json("gpt2");
  json vocab = gpt2["model"]["vocab"];
  vocab["<|endoftext|>"] = 700;  // an added token in the tokenizer.json; GPT-2's vocab.json lists it
  data_test::write_bytes(both + "/vocab.json", vocab.dump());
  std::string merges = "#version: 0.2\n";
  for (const auto& m : gpt2["model"]["merges"]) merges += m.get<std::string>() + "\n";
  data_test::write_bytes(both + "/merges.txt", merges);
  CHECK(Tokenizer::load(both).origin() == "tokenizer.json" && Tokenizer::load(both).vocab_size() == 916);
  fs::remove(both + "/tokenizer.json");
  CHECK(Tokenizer::load(both).origin() == "gpt2");
  const std::string ours = dir + "/ours";
  fs::create_directories(ours);
  Tokenizer::train({std::string("some training text, some more text")}, 270)
      .save(ours + "/tokenizer.flotilla.json");
  CHECK(Tokenizer::load(ours).origin() == "trained");
  fs::create_directories(dir + "/empty");
  CHECK_THROWS(Tokenizer::load(dir + "/empty"), "holds no tokenizer.json");
  // A tokenizer.json path works too, and reads the tokenizer_config.json beside it.
  const Tokenizer qwen = Tokenizer::load(kGold + "/qwen/tokenizer.json");
  CHECK(qwen.eos_id() == qwen.token_id("<|im_end|>") && qwen.pad_id() == qwen.token_id("<|endoftext|>"));
}

void test_gpt2_files_match_the_library(const std::string& dir) {
  // The GPT-2-style golden tokenizer's vocabulary and merges as vocab.json + merges.txt: the
  // hand-written GPT-2 path (its own pre-tokenizer and merge loop) must give the library's ids on
  // every golden text that no added token touches (the GPT-2 files know only <|endoftext|>).
  const std::string both = dir + "/both";
  const Tokenizer files = Tokenizer::load_gpt2(both + "/vocab.json", both + "/merges.txt");
  CHECK(files.origin() == "gpt2");
  const json golden = json::parse(data_test::read_bytes(kGold + "/golden.json"));
  const json& entry = golden.at("tokenizers").at("gpt2");
  int compared = 0, exact = 0;
  for (size_t i = 0; i < golden.at("texts").size(); ++i) {
    const std::string text = golden.at("texts")[i].at("text").get<std::string>();
    if (text.find("[CODE]") != std::string::npos || text.find("<|sep|>") != std::string::npos ||
        text.find("<|mask|>") != std::string::npos)
      continue;
    ++compared;
    const bool ok = files.encode(text, true) == entry.at("ids")[i].get<std::vector<uint32_t>>();
    CHECK_MSG(ok, "GPT-2 files on %s", golden.at("texts")[i].at("name").get<std::string>().c_str());
    exact += ok;
  }
  std::printf("GPT-2 vocab.json + merges.txt: %d/%d golden texts equal the library's ids\n", exact, compared);
  CHECK(compared >= 90);
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("tokenizer_hf_files");
  test_errors();
  test_added_ids_follow_the_library();
  test_folder_choice(dir);
  test_gpt2_files_match_the_library(dir);
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("tokenizer_hf_files");
}
