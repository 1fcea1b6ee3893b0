// tokenizer.json token for token against the `tokenizers` library: four small tokenizers trained
// with it (GPT-2, Llama 3, Qwen 2/3 and SmolLM2 styles; tests/reference/make_tokenizer_goldens.py)
// and the ids it and transformers gave on the golden texts, recorded in
// tests/engine/golden/tokenizers/golden.json. Checks every id of every text (specials matched, as
// transformers' tokenizer(text) with its post-processor, and with specials as plain text), the
// decoded text, each token's byte offset, and the named BOS/EOS/PAD ids; then three edited files
// for options the families leave fixed (add_prefix_space, MergedWithNext, contiguous Digits).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/tokenizer/bpe.h"
#include "test_data_util.h"

using namespace flotilla;
using nlohmann::json;

namespace {

std::string show(const std::vector<uint32_t>& ids, size_t from) {
  std::string s;
  for (size_t i = from; i < ids.size() && i < from + 8; ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

// Bytes as text, each maximal invalid UTF-8 sequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    const size_t n = b < 0x80             ? 1
                     : (b & 0xE0) == 0xC0 ? 2
                     : (b & 0xF0) == 0xE0 ? 3
                     : (b & 0xF8) == 0xF0 ? 4
                                          : 0;
    bool ok = n > 0 && i + n <= bytes.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<uint8_t>(bytes[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(bytes, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      while (i < bytes.size() && (static_cast<uint8_t>(bytes[i]) & 0xC0) == 0x80) ++i;
    }
  }
  return out;
}

// Index of the first difference, or -1.
long first_difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

bool same_ids(const char* what, const std::string& tok, const std::string& name,
              const std::vector<uint32_t>& got, const json& want_json) {
  const std::vector<uint32_t> want = want_json.get<std::vector<uint32_t>>();
  const long d = first_difference(got, want);
  CHECK_MSG(d < 0, "%s %s text %s: %zu ids vs %zu expected, first difference at %ld: got [%s] want [%s]",
            tok.c_str(), what, name.c_str(), got.size(), want.size(), d,
            show(got, d < 0 ? 0 : static_cast<size_t>(d)).c_str(),
            show(want, d < 0 ? 0 : static_cast<size_t>(d)).c_str());
  return d < 0;
}

}  // namespace

int main() {
  const std::string root = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers";
  const json golden = json::parse(data_test::read_bytes(root + "/golden.json"));
  const json& texts = golden.at("texts");
  CHECK(texts.size() >= 140);
  int total_exact = 0, total = 0;
  for (const auto& [name, entry] : golden.at("tokenizers").items()) {
    const Tokenizer tok = Tokenizer::load(root + "/" + name);
    CHECK(tok.origin() == "tokenizer.json");
    CHECK_MSG(tok.vocab_size() == entry.at("vocab_size").get<int>(), "%s: vocab %d vs %d", name.c_str(),
              tok.vocab_size(), entry.at("vocab_size").get<int>());
    for (const char* key : {"bos", "eos", "pad"}) {
      const std::optional<uint32_t> got = key[0] == 'b'   ? tok.bos_id()
                                          : key[0] == 'e' ? tok.eos_id()
                                                          : tok.pad_id();
      const json& want = entry.at(key);
      CHECK_MSG(want.is_null() ? !got.has_value() : (got && *got == want.get<uint32_t>()), "%s: %s id",
                name.c_str(), key);
    }
    int exact = 0, model_exact = 0, split_exact = 0, decode_exact = 0, offsets_ok = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string text_name = texts[i].at("name").get<std::string>();
      const std::string text = texts[i].at("text").get<std::string>();
      std::vector<uint32_t> ids, starts;
      tok.encode_append(text, true, ids, &starts);
      const bool ok = same_ids("ids", name, text_name, ids, entry.at("ids")[i]);
      exact += ok;
      const json& model = entry.at("model_ids");
      model_exact += same_ids("model_ids", name, text_name, tok.encode_model_input(text),
                              model.contains(text_name) ? model.at(text_name) : entry.at("ids")[i]);
      const json& split = entry.at("split_special_ids");
      split_exact += same_ids("split_special_ids", name, text_name, tok.encode(text, false),
                              split.contains(text_name) ? split.at(text_name) : entry.at("ids")[i]);
      const json& decoded = entry.at("decoded");
      const std::string want_text =
          decoded.contains(text_name) ? decoded.at(text_name).get<std::string>() : text;
      // The library turns the decoded bytes into text lossily (U+FFFD for invalid UTF-8); the engine
      // returns the bytes, which must give that text.
      const std::string back = utf8_lossy(tok.decode(entry.at("ids")[i].get<std::vector<uint32_t>>()));
      CHECK_MSG(back == want_text, "%s decode %s", name.c_str(), text_name.c_str());
      decode_exact += back == want_text;
      // Offsets: a token's bytes sit at its start in the text (the normalized text for NFC), checked
      // where the text decodes back unchanged; elsewhere (lstrip/rstrip, added tokens whose bytes are
      // not their text) only their order is checked.
      const std::string basis = tok.normalize(text);
      bool offsets = starts.size() == ids.size();
      for (size_t k = 0; offsets && k < ids.size(); ++k) {
        if (k > 0 && starts[k] < starts[k - 1]) offsets = false;
        const std::string& bytes = tok.token_bytes(ids[k]);
        if (!tok.is_special(ids[k]) && !decoded.contains(text_name) &&
            basis.compare(starts[k], bytes.size(), bytes) != 0)
          offsets = false;
      }
      CHECK_MSG(offsets, "%s offsets %s", name.c_str(), text_name.c_str());
      offsets_ok += offsets;
    }
    std::printf(
        "%s: %d/%zu texts exact (ids), %d/%zu model ids, %d/%zu special-as-text ids, %d/%zu decode, %d/%zu "
        "offsets\n",
        name.c_str(), exact, texts.size(), model_exact, texts.size(), split_exact, texts.size(), decode_exact,
        texts.size(), offsets_ok, texts.size());
    total_exact += exact;
    total += static_cast<int>(texts.size());
  }
  std::printf("all tokenizers: %d/%d texts exact\n", total_exact, total);

  // Options the four families leave at one value, by editing their files as the script did.
  for (const json& v : golden.at("variants")) {
    const std::string base = v.at("tokenizer").get<std::string>(), edit = v.at("edit").get<std::string>();
    json file = json::parse(data_test::read_bytes(root + "/" + base + "/tokenizer.json"));
    if (edit == "add_prefix_space")
      file["pre_tokenizer"]["add_prefix_space"] = true;
    else if (edit == "merged_with_next")
      file["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
    else if (edit == "contiguous_digits")
      file["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
    else
      CHECK_MSG(false, "unknown variant %s", edit.c_str());
    const Tokenizer tok = Tokenizer::from_hf_json(file.dump(), base + "+" + edit);
    int exact = 0, n = 0;
    for (size_t k = 0; k < v.at("texts").size(); ++k) {
      const size_t i = v.at("texts")[k].get<size_t>();
      exact += same_ids("variant", base + "+" + edit, texts[i].at("name").get<std::string>(),
                        tok.encode(texts[i].at("text").get<std::string>(), true), v.at("ids")[k]);
      ++n;
    }
    std::printf("%s + %s: %d/%d texts exact\n", base.c_str(), edit.c_str(), exact, n);
  }
  return flotilla_test::summary("tokenizer_hf_golden");
}
