// The config key list is frozen and documented: the schema matches every field of run_config.h
// (same doc line), the key list equals tests/engine/golden/config_keys.txt, docs/config.md is the
// generated reference (and names every key), and the shipped example configs parse and validate.
#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"

using namespace flotilla;

namespace {

const std::string kSource = FLOTILLA_SOURCE_DIR;

std::string read(const std::string& relative) {
  std::ifstream in(kSource + "/" + relative, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Reports the first differing line of two texts.
bool same_text(const std::string& want, const std::string& got, const char* what, const char* regenerate) {
  if (want == got) return true;
  const auto a = lines(want), b = lines(got);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  std::fprintf(stderr, "%s is out of date at line %zu:\n  file: %s\n  code: %s\nRegenerate it with:\n  %s\n",
               what, i + 1, i < a.size() ? a[i].c_str() : "<end>", i < b.size() ? b[i].c_str() : "<end>",
               regenerate);
  return false;
}

// run_config.h's lines with a declaration clang-format broke after its "=" joined back into one
// ("std::string targets =" + "\"all-linear\";  // ...").
std::vector<std::string> joined_lines(const std::string& text) {
  const std::regex broken(R"(^\s+[\w:]+\s+\w+\s*=\s*$)");
  std::vector<std::string> out;
  for (const auto& l : lines(text)) {
    if (!out.empty() && std::regex_search(out.back(), broken)) {
      out.back().push_back(' ');
      out.back().append(l, std::min(l.find_first_not_of(' '), l.size()), std::string::npos);
    } else {
      out.push_back(l);
    }
  }
  return out;
}

// Every field declared in run_config.h: "section.name" -> its // comment.
std::map<std::string, std::string> header_fields() {
  const std::string text = read("engine/config/run_config.h");
  std::map<std::string, std::string> section_of_struct;  // "RunSection" -> "run"
  const std::regex member(R"(^\s+(\w+Section)\s+(\w+);)");
  const std::regex field(R"(^\s+[\w:]+\s+(\w+)\s*=\s*[^;]*;\s*//\s*(.*\S)\s*$)");
  const std::regex open(R"(^struct\s+(\w+)\s*\{)");
  for (const auto& l : lines(text)) {
    std::smatch m;
    if (std::regex_search(l, m, member)) section_of_struct[m[1]] = m[2];
  }
  std::map<std::string, std::string> out;
  std::string current;
  for (const auto& l : joined_lines(text)) {
    std::smatch m;
    if (std::regex_search(l, m, open))
      current = m[1];
    else if (l.rfind("};", 0) == 0)
      current.clear();
    else if (!current.empty() && section_of_struct.count(current) && std::regex_search(l, m, field))
      out[section_of_struct[current] + "." + m[1].str()] = m[2];
  }
  return out;
}

void test_schema_matches_header() {
  const auto fields = header_fields();
  CHECK_MSG(fields.size() >= 50, "parsed only %zu fields from run_config.h", fields.size());
  std::set<std::string> in_schema;
  for (const auto& key : config_keys()) {
    in_schema.insert(key.path());
    auto it = fields.find(key.path());
    CHECK_MSG(it != fields.end(), "schema key %s is not a field of run_config.h", key.path().c_str());
    if (it != fields.end())
      CHECK_MSG(it->second == key.doc, "%s: doc differs\n  header: %s\n  schema: %s", key.path().c_str(),
                it->second.c_str(), key.doc.c_str());
  }
  for (const auto& [path, doc] : fields)
    CHECK_MSG(in_schema.count(path), "run_config.h field %s has no row in engine/config/config_schema.cpp",
              path.c_str());
}

void test_golden_key_list() {
  CHECK(
      same_text(read("tests/engine/golden/config_keys.txt"), config_key_list(),
                "tests/engine/golden/config_keys.txt (adding or removing a config key must be deliberate)",
                "build/bin/flotilla-worker plan --print-config-keys > tests/engine/golden/config_keys.txt"));
}

void test_docs() {
  const std::string docs = read("docs/config.md");
  CHECK(same_text(docs, config_docs_markdown(), "docs/config.md",
                  "build/bin/flotilla-worker plan --print-config-docs > docs/config.md"));
  for (const auto& key : config_keys())
    CHECK_MSG(docs.find("| `" + key.path() + "` | " + key_type_name(key.type()) + " |") != std::string::npos,
              "docs/config.md has no row for %s", key.path().c_str());
  for (const auto& s : config_sections())
    CHECK_MSG(docs.find(std::string("## [") + s.name + "]") != std::string::npos, "no section %s", s.name);
}

// The ```toml example in docs/config.md.
std::string docs_example() {
  const std::string docs = read("docs/config.md");
  const auto start = docs.find("```toml\n");
  const auto end = docs.find("```", start + 8);
  if (start == std::string::npos || end == std::string::npos) return "";
  return docs.substr(start + 8, end - start - 8);
}

void test_examples() {
  const std::string example = docs_example();
  CHECK(!example.empty());
  try {
    const RunConfig from_docs = parse_config_toml(example, "docs/config.md");
    CHECK(validate(from_docs).empty());
    const RunConfig demo = load_config_file(kSource + "/resources/configs/demo.toml");
    CHECK_MSG(validate(demo).empty(), "%s",
              validate(demo).empty() ? "" : to_string(validate(demo)[0]).c_str());
    const auto diff = config_diff(from_docs, demo);
    CHECK_MSG(diff.empty(), "docs example and resources/configs/demo.toml differ at %s",
              diff.empty() ? "" : diff[0].c_str());
    CHECK(demo.model.n_layer == 4 && demo.model.n_embd == 256 && demo.model.vocab_size <= 1024);
    CHECK(demo.train.steps == 200 && demo.checkpoint.every == 50 && demo.eval.every == 25);
    CHECK(demo.data.source == "synthetic");

    const RunConfig gpt2 = load_config_file(kSource + "/resources/configs/gpt2-124m-shards.toml");
    CHECK_MSG(validate(gpt2).empty(), "%s",
              validate(gpt2).empty() ? "" : to_string(validate(gpt2)[0]).c_str());
    CHECK(gpt2.data.source == "shards" && gpt2.model.n_layer == 12 && gpt2.model.n_embd == 768);
    CHECK(tokens_per_step(gpt2) == 524288 && grad_accum_steps(gpt2) == 16);
    RunConfig eight = gpt2;
    apply_override(eight, "parallel.dp=8");  // the launch recipe in the file's comment
    CHECK(validate(eight, 8).empty() && grad_accum_steps(eight) == 2);
  } catch (const Error& e) {
    CHECK_MSG(false, "%s", e.what());
  }
}

}  // namespace

int main() {
  test_schema_matches_header();
  test_golden_key_list();
  test_docs();
  test_examples();
  return flotilla_test::summary("test_config_docs");
}
