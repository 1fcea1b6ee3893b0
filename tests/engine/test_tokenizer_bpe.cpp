// Byte-level BPE: training (exact merges and tie-breaking on a hand-counted text, determinism),
// encode/decode round trips on arbitrary bytes (UTF-8 and invalid UTF-8), save/load, special
// tokens, the long-piece heap algorithm against GPT-2's pass algorithm, and the pre-tokenizer
// against splits produced by GPT-2's regex (Python `regex` module, pasted below as goldens).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pretokenize.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

const char* kText =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.\n"
    "It's the fox's den, and they're sure we'll find it. 12 foxes, 345 dogs, 6789 hens!\n"
    "Über die Brücke gehen wir. Café au lait, naïve résumé. Привет, мир! 日本語のテキスト。\n"
    "    indented code: for (int i = 0; i < n; ++i) { sum += x[i]; }\n\n\n"
    "The end. The end. The end.";

// A deterministic corpus with repeated words, so that training finds plenty of frequent pairs.
std::string corpus() {
  const char* words[] = {"the",   "fox",  "dog",  "jumps",  "over",  "lazy", "quick",
                         "brown", "and",  "runs", "sleeps", "away",  "den",  "they're",
                         "we'll", "find", "it",   "Brücke", "naïve", "мир"};
  Rng rng(3);
  std::string out;
  for (int i = 0; i < 3000; ++i) {
    out += words[rng.below(20)];
    out += rng.below(10) == 0 ? ".\n" : rng.below(8) == 0 ? ", " : " ";
  }
  return out;
}

void test_pretokenizer_goldens() {
  struct Case {
    const char* text;
    std::vector<std::string> pieces;
  };
  // Generated with Python: regex.findall(GPT-2's pattern, text), Unicode 14.
  const std::vector<Case> cases = {
      {"Hello world", {"Hello", " world"}},
      {"don't you're I'll we've 'sup", {"don", "'t", " you", "'re", " I", "'ll", " we", "'ve", " '", "sup"}},
      {"  leading", {" ", " leading"}},
      {"trailing   ", {"trailing", "   "}},
      {"a\x0a"
       "\x0a"
       "b",
       {"a",
        "\x0a"
        "",
        "\x0a"
        "",
        "b"}},
      {"a \x0a"
       "\x0a"
       " b",
       {"a",
        " \x0a"
        "\x0a"
        "",
        " b"}},
      {"  \x0a"
       "  x",
       {"  \x0a"
        " ",
        " x"}},
      {"x  'll", {"x", " ", " '", "ll"}},
      {"\xc3"
       "\xbc"
       "ber caf\xc3"
       "\xa9"
       ", na\xc3"
       "\xaf"
       "ve!",
       {"\xc3"
        "\xbc"
        "ber",
        " caf\xc3"
        "\xa9"
        "",
        ",",
        " na\xc3"
        "\xaf"
        "ve",
        "!"}},
      {"\xe6"
       "\x97"
       "\xa5"
       "\xe6"
       "\x9c"
       "\xac"
       "\xe8"
       "\xaa"
       "\x9e"
       "\xe3"
       "\x81"
       "\xae"
       "\xe3"
       "\x83"
       "\x86"
       "\xe3"
       "\x82"
       "\xad"
       "\xe3"
       "\x82"
       "\xb9"
       "\xe3"
       "\x83"
       "\x88"
       "\xe3"
       "\x80"
       "\x81"
       "\xe3"
       "\x81"
       "\xa7"
       "\xe3"
       "\x81"
       "\x99"
       "\xe3"
       "\x80"
       "\x82"
       "",
       {"\xe6"
        "\x97"
        "\xa5"
        "\xe6"
        "\x9c"
        "\xac"
        "\xe8"
        "\xaa"
        "\x9e"
        "\xe3"
        "\x81"
        "\xae"
        "\xe3"
        "\x83"
        "\x86"
        "\xe3"
        "\x82"
        "\xad"
        "\xe3"
        "\x82"
        "\xb9"
        "\xe3"
        "\x83"
        "\x88"
        "",
        "\xe3"
        "\x80"
        "\x81"
        "",
        "\xe3"
        "\x81"
        "\xa7"
        "\xe3"
        "\x81"
        "\x99"
        "",
        "\xe3"
        "\x80"
        "\x82"
        ""}},
      {"3.14159 and 1,000,000", {"3", ".", "14159", " and", " 1", ",", "000", ",", "000"}},
      {"emoji \xf0"
       "\x9f"
       "\x98"
       "\x80"
       "\xf0"
       "\x9f"
       "\x98"
       "\x80"
       " ok",
       {"emoji",
        " \xf0"
        "\x9f"
        "\x98"
        "\x80"
        "\xf0"
        "\x9f"
        "\x98"
        "\x80"
        "",
        " ok"}},
      {"mix123abc", {"mix", "123", "abc"}},
      {"\x09"
       "x\x0d"
       "\x0a"
       "y",
       {"\x09"
        "",
        "x",
        "\x0d"
        "",
        "\x0a"
        "",
        "y"}},
      {"a\xc2"
       "\xa0"
       "b\xe3"
       "\x80"
       "\x80"
       "c",
       {"a",
        "\xc2"
        "\xa0"
        "",
        "b",
        "\xe3"
        "\x80"
        "\x80"
        "",
        "c"}},
      {"\xc2"
       "\xb9"
       "\xc2"
       "\xb2"
       "\xc2"
       "\xb3"
       " \xc2"
       "\xbd"
       " \xd9"
       "\xa3"
       "",
       {"\xc2"
        "\xb9"
        "\xc2"
        "\xb2"
        "\xc2"
        "\xb3"
        "",
        " \xc2"
        "\xbd"
        "",
        " \xd9"
        "\xa3"
        ""}},
      {"e\xcc"
       "\x81"
       " \xe0"
       "\xa4"
       "\x95"
       "\xe0"
       "\xa5"
       "\x8d"
       "\xe0"
       "\xa4"
       "\xb7"
       "\xe0"
       "\xa4"
       "\xa4"
       "\xe0"
       "\xa5"
       "\x8d"
       "\xe0"
       "\xa4"
       "\xb0"
       "\xe0"
       "\xa4"
       "\xbf"
       "\xe0"
       "\xa4"
       "\xaf"
       "",
       {"e",
        "\xcc"
        "\x81"
        "",
        " \xe0"
        "\xa4"
        "\x95"
        "",
        "\xe0"
        "\xa5"
        "\x8d"
        "",
        "\xe0"
        "\xa4"
        "\xb7"
        "\xe0"
        "\xa4"
        "\xa4"
        "",
        "\xe0"
        "\xa5"
        "\x8d"
        "",
        "\xe0"
        "\xa4"
        "\xb0"
        "",
        "\xe0"
        "\xa4"
        "\xbf"
        "",
        "\xe0"
        "\xa4"
        "\xaf"
        ""}},
      {"...!!!\x3f"
       "\x3f"
       "\x3f"
       " ",
       {"...!!!\x3f"
        "\x3f"
        "\x3f"
        "",
        " "}},
      {"A'S 'S 'Ll", {"A", "'", "S", " '", "S", " '", "Ll"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string_view> got;
    pretokenize(c.text, got);
    bool same = got.size() == c.pieces.size();
    for (size_t i = 0; same && i < got.size(); ++i) same = got[i] == c.pieces[i];
    CHECK_MSG(same, "pre-tokenization of '%s' differs from GPT-2's regex", c.text);
  }
  CHECK(classify_code_point(' ') == CharClass::kSpace);
  CHECK(classify_code_point(0x3000) == CharClass::kSpace);
  CHECK(classify_code_point(0x00E9) == CharClass::kLetter);
  CHECK(classify_code_point(0x0663) == CharClass::kNumber);
  CHECK(classify_code_point(0x0301) == CharClass::kOther);
  CHECK(classify_code_point(0x1F600) == CharClass::kOther);
}

void test_training_exact() {
  // Pieces "ab", " ab", " cd", " cd": pair counts (a,b)=2, (' ',c)=2, (c,d)=2, (' ',a)=1.
  // Ties go to the smaller (left, right) ids: first (32,99) " c", then (97,98) "ab", then
  // (256,100) " cd"; then only singletons remain, so training stops at 256 + 3 + 1 = 260 tokens.
  const Tokenizer t = Tokenizer::train({"ab ab cd cd"}, 1000);
  CHECK(t.vocab_size() == 260);
  CHECK(t.merges().size() == 3);
  if (t.merges().size() == 3) {
    CHECK(t.merges()[0].left == 32 && t.merges()[0].right == 99 && t.merges()[0].result == 256);
    CHECK(t.merges()[1].left == 97 && t.merges()[1].right == 98 && t.merges()[1].result == 257);
    CHECK(t.merges()[2].left == 256 && t.merges()[2].right == 100 && t.merges()[2].result == 258);
  }
  CHECK(t.eot_id() == 259 && t.token_bytes(259) == "<|endoftext|>");
  CHECK(t.token_bytes(258) == " cd");
  CHECK((t.encode("ab cd ab") == std::vector<uint32_t>{257, 258, 32, 257}));
  // The vocabulary limit stops training early: 258 = 256 bytes + 1 merge + EOT.
  const Tokenizer small = Tokenizer::train({"ab ab cd cd"}, 258);
  CHECK(small.vocab_size() == 258 && small.merges().size() == 1 && small.eot_id() == 257);
  CHECK_THROWS(Tokenizer::train({"x"}, 256), "at least 257");
}

void test_round_trips(const Tokenizer& t) {
  const std::vector<uint32_t> ids = t.encode(kText);
  CHECK(t.decode(ids) == kText);
  for (uint32_t id : ids) CHECK(id < static_cast<uint32_t>(t.vocab_size()) && id != t.eot_id());

  const std::vector<std::string> odd = {
      "",
      std::string(1, '\0'),
      std::string("\x80\x81\xfe\xff", 4),         // stray continuation bytes, 0xFE/0xFF
      std::string("\xc3", 1),                     // truncated 2-byte sequence
      std::string("ab\xe6\x97", 4),               // truncated 3-byte sequence
      std::string("\xc0\x80 overlong", 10),       // overlong NUL
      std::string("\xed\xa0\x80 surrogate", 13),  // UTF-16 surrogate in UTF-8
      std::string("\xf4\x90\x80\x80 > U+10FFFF", 15),
      "tabs\tand\r\nCRLF\n",
      "\xf0\x9f\x98\x80 emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x80",
      std::string(1000, ' ') + "x" + std::string(700, 'a'),  // long pieces take the heap path
  };
  for (const std::string& s : odd)
    CHECK_MSG(t.decode(t.encode(s)) == s, "round trip failed for a %zu-byte input", s.size());
  Rng rng(99);
  bool all = true;
  for (int i = 0; i < 2000; ++i) {
    std::string s(static_cast<size_t>(rng.below(64)), '\0');
    for (char& c : s) c = static_cast<char>(rng.below(256));
    all = all && t.decode(t.encode(s)) == s;
  }
  CHECK_MSG(all, "random byte strings must round-trip");
}

void test_heap_matches_pass_algorithm(const Tokenizer& t) {
  Rng rng(5);
  bool all = true;
  std::vector<std::string> pieces = {std::string(600, 'a'), std::string(301, ' '),
                                     "The end. The end. The end."};
  std::string ab;
  for (int i = 0; i < 200; ++i) ab += "ab";
  pieces.push_back(ab);
  for (int i = 0; i < 50; ++i) {
    std::string s(300 + static_cast<size_t>(rng.below(300)), 'a');
    for (char& c : s) c = "thequickbrownfox "[rng.below(17)];
    pieces.push_back(s);
  }
  for (const std::string& p : pieces) {
    const auto pass = t.encode_piece_for_test(p, false), heap = t.encode_piece_for_test(p, true);
    all = all && pass == heap && t.decode(pass) == p;
  }
  CHECK(all);
}

void test_save_load_and_determinism(const Tokenizer& t, const std::string& dir) {
  const Tokenizer again = Tokenizer::train({kText, corpus()}, 330);
  CHECK(again.to_json() == t.to_json());  // deterministic training
  const std::string path = dir + "/tok.json";
  t.save(path);
  const Tokenizer loaded = Tokenizer::load(path);
  CHECK(loaded.to_json() == t.to_json());
  CHECK(loaded.encode(kText) == t.encode(kText));
  CHECK(loaded.eot_id() == t.eot_id() && loaded.origin() == "trained");

  // A damaged file fails with its name and the fault.
  std::string json = t.to_json();
  const size_t at = json.find("\"merges\": [\n    [");
  if (at != std::string::npos) {
    std::string bad = json;
    bad.replace(at + 17, 1, "7");  // first merge's left id 9x -> 7x: bytes no longer concatenate
    data_test::write_bytes(dir + "/bad.json", bad);
    CHECK_THROWS(Tokenizer::load(dir + "/bad.json"), "bad.json");
  }
  data_test::write_bytes(dir + "/junk.json", "{\"hello\": [1, 2]}");
  CHECK_THROWS(Tokenizer::load(dir + "/junk.json"),
               "neither a Flotilla tokenizer JSON");
  data_test::write_bytes(dir + "/broken.json", "{\"format\": \"flotilla-bpe\", ");
  CHECK_THROWS(Tokenizer::load(dir + "/broken.json"), "not valid JSON");
  CHECK_THROWS(Tokenizer::load(dir + "/absent.json"), "absent.json");
}

void test_specials(const Tokenizer& t) {
  const std::string text = "one<|endoftext|>two";
  const auto plain = t.encode(text), special = t.encode(text, true);
  CHECK(std::find(plain.begin(), plain.end(), t.eot_id()) == plain.end());
  CHECK(std::count(special.begin(), special.end(), t.eot_id()) == 1);
  CHECK(t.decode(plain) == text && t.decode(special) == text);
  CHECK_THROWS(t.decode({static_cast<uint32_t>(t.vocab_size())}), "outside the tokenizer's vocabulary");
  try {
    t.decode({100000});
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kData);
  }
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("tokenizer_bpe");
  test_pretokenizer_goldens();
  test_training_exact();
  const std::string text = corpus();
  const Tokenizer t = Tokenizer::train({kText, text}, 330);
  const size_t n_ids = t.encode(text).size();
  std::printf("trained: %d tokens; corpus %zu bytes -> %zu tokens\n", t.vocab_size(), text.size(), n_ids);
  CHECK(t.vocab_size() == 330);
  CHECK(n_ids * 3 < text.size());  // the merges compress text like the training text
  test_round_trips(t);
  test_heap_matches_pass_algorithm(t);
  test_save_load_and_determinism(t, dir);
  test_specials(t);
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("tokenizer_bpe");
}
