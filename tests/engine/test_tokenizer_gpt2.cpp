// GPT-2 vocab.json + merges.txt: the byte -> printable code point map (space -> 'Ġ' U+0120,
// newline -> 'Ċ' U+010A, ...), merges applied in rank order (swapping two merges changes the
// output), ids kept from vocab.json (bytes at GPT-2's ids 0-255, <|endoftext|> last), and clear
// errors for inconsistent files. The fixture is built here; nothing is downloaded.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/tokenizer/bpe.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

std::string u(uint32_t cp) {  // one code point as UTF-8
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A GPT-2-style fixture: the 256 byte tokens with GPT-2's ids (in bytes_to_unicode order: the
// printable bytes first, so '!' = 0, 'Ċ' = 198, 'Ġ' = 220), then the merges' results in order,
// then <|endoftext|>. Returns the ids of the merge results.
std::vector<uint32_t> write_fixture(const std::string& dir,
                                    const std::vector<std::pair<std::string, std::string>>& merges) {
  std::filesystem::create_directories(dir);
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t id = 0;
  std::vector<int> order;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) order.push_back(b);
  }
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (!printable) order.push_back(b);
  }
  for (int b : order) vocab[gpt2_bytes_to_text(std::string(1, static_cast<char>(b)))] = id++;
  std::string merges_txt = "#version: 0.2\n";
  std::vector<uint32_t> ids;
  for (const auto& [a, b] : merges) {
    merges_txt += a + " " + b + "\n";
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    ids.push_back(vocab[a + b].get<uint32_t>());
  }
  vocab["<|endoftext|>"] = id++;
  data_test::write_bytes(dir + "/vocab.json", vocab.dump());
  data_test::write_bytes(dir + "/merges.txt", merges_txt);
  return ids;
}

void test_byte_map() {
  CHECK(gpt2_byte_to_code_point(' ') == 0x120);   // 'Ġ'
  CHECK(gpt2_byte_to_code_point('\n') == 0x10A);  // 'Ċ'
  CHECK(gpt2_byte_to_code_point('\t') == 0x109);  // 'ĉ'
  CHECK(gpt2_byte_to_code_point(0) == 0x100);     // 'Ā'
  CHECK(gpt2_byte_to_code_point('!') == '!');
  CHECK(gpt2_byte_to_code_point('A') == 'A');
  CHECK(gpt2_byte_to_code_point(0x7F) == 0x121);  // DEL follows the 33 bytes 0..32
  CHECK(gpt2_byte_to_code_point(0xA0) == 0x142);  // NBSP: the last of 127..160
  CHECK(gpt2_byte_to_code_point(0xAD) == 0x143);  // soft hyphen: 'Ń'
  CHECK(gpt2_byte_to_code_point(0xE9) == 0xE9);   // 'é' maps to itself
  bool bijective = true;
  for (int b = 0; b < 256; ++b)
    bijective = bijective && gpt2_code_point_to_byte(gpt2_byte_to_code_point(static_cast<uint8_t>(b))) == b;
  CHECK(bijective);
  CHECK(gpt2_code_point_to_byte(0x7F) == -1);
  CHECK(gpt2_code_point_to_byte(0x20) == -1);
  CHECK(gpt2_bytes_to_text(" the\n") == u(0x120) + "the" + u(0x10A));
  std::string bytes;
  CHECK(gpt2_text_to_bytes(u(0x120) + "world", &bytes) && bytes == " world");
  CHECK(!gpt2_text_to_bytes("a b", &bytes));  // a raw space is not in GPT-2's printable form
}

void test_merge_order(const std::string& dir) {
  const std::string G = u(0x120);
  // Fixture A: "h e" before "e r"; fixture B: the same two merges swapped.
  const auto a_ids =
      write_fixture(dir + "/a", {{G, "t"}, {"h", "e"}, {G + "t", "he"}, {"e", "r"}, {"he", "r"}});
  const auto b_ids = write_fixture(dir + "/b", {{"e", "r"}, {"h", "e"}});
  const Tokenizer a = Tokenizer::load(dir + "/a");
  const Tokenizer b = Tokenizer::load(dir + "/b/vocab.json");  // merges.txt found beside it
  CHECK(a.origin() == "gpt2" && a.vocab_size() == 256 + 5 + 1);
  CHECK(a.eot_id() == 261 && b.eot_id() == 258);
  CHECK(a.token_bytes(220) == " " && a.token_bytes(198) == "\n" && a.token_bytes(0) == "!");
  CHECK((a.encode(" \n!") == std::vector<uint32_t>{220, 198, 0}));

  // " the": Ġ+t (rank 0), h+e (rank 1), Ġt+he (rank 2) -> one token.
  CHECK((a.encode(" the") == std::vector<uint32_t>{a_ids[2]}));
  // "her": in A, h+e (rank 1) beats e+r (rank 3), then he+r (rank 4) -> "her" as one token.
  CHECK((a.encode("her") == std::vector<uint32_t>{a_ids[4]}));
  // In B, e+r has rank 0 and wins: h + er.
  CHECK((b.encode("her") == std::vector<uint32_t>{'h' - '!', b_ids[0]}));
  // Pre-tokenization keeps merges inside pieces: "the her" = "the" + " her".
  const auto ids = a.encode("the her");
  CHECK((ids == std::vector<uint32_t>{'t' - '!', a_ids[1], 220, a_ids[4]}));
  CHECK(a.decode(ids) == "the her");
  // <|endoftext|> is a special token: an id only with allow_special.
  CHECK((a.encode("<|endoftext|>", true) == std::vector<uint32_t>{a.eot_id()}));
  CHECK(a.encode("<|endoftext|>").size() > 1);
  CHECK(a.decode({a.eot_id()}) == "<|endoftext|>");

  // Saved in our format and reloaded: the same tokenizer.
  a.save(dir + "/a.json");
  const Tokenizer again = Tokenizer::load(dir + "/a.json");
  CHECK(again.origin() == "gpt2" && again.encode("the her there") == a.encode("the her there"));
  CHECK(again.eot_id() == a.eot_id());
}

void test_errors(const std::string& dir) {
  const std::string G = u(0x120);
  write_fixture(dir + "/e1", {{"h", "e"}});
  data_test::write_bytes(dir + "/e1/merges.txt", "#version: 0.2\nh e\nzz q\n");
  CHECK_THROWS(Tokenizer::load(dir + "/e1"), "merges.txt line 3: token 'zz' is not in vocab.json");
  data_test::write_bytes(dir + "/e1/merges.txt", "#version: 0.2\nh e\nh r\n");
  CHECK_THROWS(Tokenizer::load(dir + "/e1"), "line 3: merge result 'hr' is not in vocab.json");
  data_test::write_bytes(dir + "/e1/merges.txt", "#version: 0.2\nh  e\n");
  CHECK_THROWS(Tokenizer::load(dir + "/e1"), "expected two tokens separated by one space");
  std::filesystem::remove(dir + "/e1/merges.txt");
  CHECK_THROWS(Tokenizer::load(dir + "/e1"), "merges.txt");

  write_fixture(dir + "/e2", {});
  nlohmann::json vocab = nlohmann::json::parse(data_test::read_bytes(dir + "/e2/vocab.json"));
  CHECK(vocab.erase("<|endoftext|>") == 1);
  data_test::write_bytes(dir + "/e2/vocab.json", vocab.dump());
  CHECK_THROWS(Tokenizer::load(dir + "/e2"), "has no <|endoftext|> token");
  data_test::write_bytes(dir + "/e2/vocab.json", "{\"a\": 0, \"b\": 0}");
  CHECK_THROWS(Tokenizer::load(dir + "/e2"), "id 0 is used twice");
  try {
    Tokenizer::load(dir + "/nowhere");
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kData && data_test::contains(e.what(), "nowhere"));
  }
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("tokenizer_gpt2");
  test_byte_map();
  test_merge_order(dir);
  test_errors(dir);
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("tokenizer_gpt2");
}
