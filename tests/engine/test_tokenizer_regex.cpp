// The Split pre-tokenizer against the `tokenizers` library: the pieces its Oniguruma regexes give
// (recorded in golden.json's "regex" section for the constructs whose meaning differs in PCRE2:
// \s, \S, \w, \W, \h, \d, ^ and $, {,n}, (?i:...)), all five behaviours with and without invert,
// the refusals for what PCRE2 cannot reproduce, and invalid UTF-8 bytes splitting back losslessly.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/tokenizer/regex_split.h"
#include "test_data_util.h"

using namespace flotilla;
using nlohmann::json;

namespace {

std::vector<std::string> split(const SplitRegex& re, const std::string& subject, SplitBehavior b,
                               bool invert) {
  std::vector<RegexSpan> spans;
  re.find_matches(subject, spans);
  std::vector<std::pair<uint32_t, uint32_t>> cuts;
  split_spans(spans, b, invert, cuts);
  std::vector<std::string> out;
  for (const auto& [s, e] : cuts) out.push_back(subject.substr(s, e - s));
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += "[" + p + "]";
  return s;
}

}  // namespace

int main() {
  const json golden = json::parse(data_test::read_bytes(std::string(FLOTILLA_SOURCE_DIR) +
                                                        "/tests/engine/golden/tokenizers/golden.json"));
  int exact = 0, total = 0;
  for (const json& c : golden.at("regex")) {
    const std::string pattern = c.at("pattern").get<std::string>();
    const SplitRegex re = c.at("kind") == "Regex" ? SplitRegex::oniguruma(pattern, "test")
                                                  : SplitRegex::literal(pattern, "test");
    SplitBehavior b;
    CHECK(parse_split_behavior(c.at("behavior").get<std::string>(), &b));
    const auto got = split(re, c.at("subject").get<std::string>(), b, c.at("invert").get<bool>());
    const auto want = c.at("pieces").get<std::vector<std::string>>();
    CHECK_MSG(got == want, "%s %s invert=%d on '%s': got %s want %s (PCRE2 form %s)", pattern.c_str(),
              c.at("behavior").get<std::string>().c_str(), c.at("invert").get<bool>() ? 1 : 0,
              c.at("subject").get<std::string>().c_str(), join(got).c_str(), join(want).c_str(),
              re.pcre2_pattern().c_str());
    exact += got == want;
    ++total;
  }
  std::printf("regex goldens: %d/%d splits equal the library's\n", exact, total);
  CHECK(total >= 100);

  // Translation of the constructs that differ.
  CHECK(translate_oniguruma(R"(\s+(?!\S))", "t") == R"([\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}]))");
  CHECK(translate_oniguruma(R"([^\s\p{L}\p{N}]+)", "t") == R"([^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)");
  CHECK(translate_oniguruma(R"(\w\h)", "t") == R"([\p{L}\p{M}\p{N}\p{Pc}][0-9a-fA-F])");
  CHECK(translate_oniguruma(R"(x{,3}\u00e9[]s])", "t") == R"(x{0,3}\x{00e9}[]s])");
  CHECK(translate_oniguruma(R"(\\s)", "t") == R"(\\s)");  // an escaped backslash, then 's'
  // Refused, with the JSON path in the message.
  CHECK_THROWS(SplitRegex::oniguruma("a{1,3}+", "pre_tokenizer.pattern.Regex"),
               "pre_tokenizer.pattern.Regex");
  CHECK_THROWS(SplitRegex::oniguruma("a{1,3}+", "p"), "interval followed by '+'");
  CHECK_THROWS(SplitRegex::oniguruma(R"([\S])", "p"), "inside a character class");
  CHECK_THROWS(SplitRegex::oniguruma(R"(\bword)", "p"), "word boundary");
  CHECK_THROWS(SplitRegex::oniguruma("(?m:a.b)", "p"), "inline option");
  CHECK_THROWS(SplitRegex::oniguruma("[a-z&&[^aeiou]]", "p"), "class intersection");
  CHECK_THROWS(SplitRegex::oniguruma("[a[bc]]", "p"), "nested character class");
  CHECK_THROWS(SplitRegex::oniguruma("(unclosed", "model.x"), "cannot compile the regex (unclosed");
  // The library's patterns compile.
  for (
      const char* p :
      {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"})
    SplitRegex::oniguruma(p, "t");

  // Invalid UTF-8 never matches and stays in the gaps; the pieces give the bytes back.
  const SplitRegex gpt2 = SplitRegex::oniguruma(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "t");
  const std::string bad("ab\xff\xfe cd \xc3 \xe2\x82 ok", 17);
  const auto pieces = split(gpt2, bad, SplitBehavior::kIsolated, false);
  std::string back;
  for (const auto& p : pieces) back += p;
  CHECK(back == bad);
  CHECK(pieces.size() >= 5 && pieces[0] == "ab");
  // An empty text is one empty gap, which no behaviour keeps.
  CHECK(split(gpt2, "", SplitBehavior::kIsolated, false).empty());
  // A long white-space run does not overflow the JIT stack.
  const std::string spaces(200000, ' ');
  CHECK(split(gpt2, spaces + "x", SplitBehavior::kIsolated, false).size() == 2);
  return flotilla_test::summary("tokenizer_regex");
}
