// Tokenizer files: our JSON format, GPT-2's vocab.json + merges.txt, and GPT-2's byte map.
//
// One non-obvious decision: our JSON stores each token in GPT-2's printable byte form ("Ġthe")
// rather than as hex or base64, so the file is readable, diffs well, and one pair of functions
// (gpt2_bytes_to_text / gpt2_text_to_bytes) serves both formats. Merges are stored as id triples
// (left, right, result), checked against the tokens' bytes on load.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
#include "engine/interop/model_source.h"
#include "engine/tokenizer/bpe_impl.h"
#include "engine/tokenizer/pretokenize.h"

namespace flotilla {

namespace {

constexpr const char* kFormatName = "flotilla-bpe";
constexpr int kFormatVersion = 1;
constexpr const char* kFolderFileName = "tokenizer.flotilla.json";  // our format inside a tokenizer folder

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[static_cast<size_t>(b)] = printable ? static_cast<uint32_t>(b) : 256 + extra++;
      to_byte[to_cp[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data(what + " " + path + ": cannot read (missing or unreadable)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool looks_special(const std::string& text) {
  return text.size() >= 4 && text.compare(0, 2, "<|") == 0 && text.compare(text.size() - 2, 2, "|>") == 0;
}

void write_file_durably(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io("cannot create " + tmp + ": " + errno_string(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t put = ::write(fd, data.data() + done, data.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw_io("cannot write " + tmp + ": " + errno_string(err));
    }
    done += static_cast<size_t>(put);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw_io("cannot save " + path + ": " + errno_string(synced ? errno : err));
  }
}

}  // namespace

uint32_t gpt2_byte_to_code_point(uint8_t byte) { return byte_map().to_cp[byte]; }

int gpt2_code_point_to_byte(uint32_t cp) {
  const auto& m = byte_map().to_byte;
  const auto it = m.find(cp);
  return it == m.end() ? -1 : it->second;
}

std::string gpt2_bytes_to_text(std::string_view bytes) {
  std::string out;
  for (char c : bytes) append_utf8(gpt2_byte_to_code_point(static_cast<uint8_t>(c)), out);
  return out;
}

bool gpt2_text_to_bytes(std::string_view text, std::string* bytes) {
  bytes->clear();
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp;
    const int len = decode_utf8(text, pos, &cp);
    const int b = cp == 0xFFFFFFFFu ? -1 : gpt2_code_point_to_byte(cp);
    if (b < 0) return false;
    *bytes += static_cast<char>(b);
    pos += static_cast<size_t>(len);
  }
  return true;
}

// ---- GPT-2 vocab.json + merges.txt ----

Tokenizer Tokenizer::load_gpt2(const std::string& vocab_json_path, const std::string& merges_txt_path) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_json_path, "GPT-2 vocab.json"));
  } catch (const nlohmann::json::exception& e) {
    throw_data("GPT-2 vocab.json " + vocab_json_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!vocab.is_object() || vocab.empty())
    throw_data("GPT-2 vocab.json " + vocab_json_path + ": expected an object of token -> id");
  auto impl = std::make_unique<Impl>();
  impl->origin = "gpt2";
  impl->tokens.assign(vocab.size(), std::string());
  std::vector<uint8_t> defined(vocab.size(), 0);
  std::unordered_map<std::string, uint32_t> id_of;  // printable form -> id
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(vocab.size()))
      throw_data("GPT-2 vocab.json " + vocab_json_path + ": token '" + key + "' has id " + value.dump() +
                 "; ids must be 0.." + std::to_string(vocab.size() - 1));
    const uint32_t id = value.get<uint32_t>();
    if (defined[id])
      throw_data("GPT-2 vocab.json " + vocab_json_path + ": id " + std::to_string(id) + " is used twice");
    defined[id] = 1;
    id_of[key] = id;
    std::string bytes;
    if (looks_special(key) || !gpt2_text_to_bytes(key, &bytes)) {
      impl->specials.push_back({id, key});
    } else {
      impl->tokens[id] = std::move(bytes);
    }
  }
  std::sort(impl->specials.begin(), impl->specials.end(),
            [](const Special& a, const Special& b) { return a.id < b.id; });

  const std::string merges_text = read_file(merges_txt_path, "GPT-2 merges.txt");
  std::istringstream lines(merges_text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const std::string where =
        "GPT-2 merges.txt " + merges_txt_path + " line " + std::to_string(line_no) + ": ";
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos || space == 0 ||
        space + 1 == line.size())
      throw_data(where + "expected two tokens separated by one space, got '" + line + "'");
    const std::string a = line.substr(0, space), b = line.substr(space + 1);
    const auto ia = id_of.find(a), ib = id_of.find(b), ir = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end())
      throw_data(where + "token '" + (ia == id_of.end() ? a : b) + "' is not in vocab.json");
    if (ir == id_of.end()) throw_data(where + "merge result '" + a + b + "' is not in vocab.json");
    impl->merges.push_back({ia->second, ib->second, ir->second});
  }
  impl->build_index(vocab_json_path);
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

// ---- our JSON ----

std::string Tokenizer::to_json() const {
  const Impl& d = *impl_;
  if (d.hf)
    throw_usage(
        "a tokenizer loaded from tokenizer.json cannot be written in Flotilla's format (its "
        "normalizer, regexes and added tokens have no place there); use its tokenizer.json folder");
  std::string out = "{\n";
  out += "  \"format\": \"" + std::string(kFormatName) + "\",\n";
  out += "  \"version\": " + std::to_string(kFormatVersion) + ",\n";
  out += "  \"origin\": " + nlohmann::json(d.origin).dump() + ",\n";
  out += "  \"pretokenizer\": \"gpt2\",\n";
  out += "  \"vocab_size\": " + std::to_string(d.tokens.size()) + ",\n";
  out += "  \"eot_id\": " + std::to_string(d.eot) + ",\n";
  out += "  \"specials\": [";
  for (size_t i = 0; i < d.specials.size(); ++i)
    out += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(d.specials[i].id) +
           ", \"text\": " + nlohmann::json(d.specials[i].text).dump() + "}";
  out += "],\n  \"tokens\": [\n";
  for (size_t id = 0; id < d.tokens.size(); ++id) {
    const std::string text = d.special[id] ? d.tokens[id] : gpt2_bytes_to_text(d.tokens[id]);
    out += "    " + nlohmann::json(text).dump() + (id + 1 < d.tokens.size() ? ",\n" : "\n");
  }
  out += "  ],\n  \"merges\": [\n";
  for (size_t r = 0; r < d.merges.size(); ++r) {
    const Merge& m = d.merges[r];
    out += "    [" + std::to_string(m.left) + ", " + std::to_string(m.right) + ", " +
           std::to_string(m.result) + "]" + (r + 1 < d.merges.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  return out;
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& source_name) {
  const std::string where = "tokenizer " + source_name + ": ";
  auto impl = std::make_unique<Impl>();
  try {
    const nlohmann::json doc = nlohmann::json::parse(json_text);
    if (!doc.is_object() || doc.value("format", std::string()) != kFormatName)
      throw_data(where + "not a Flotilla tokenizer (\"format\" is not \"" + kFormatName + "\")");
    if (doc.at("version").get<int>() != kFormatVersion)
      throw_data(where + "format version " + doc.at("version").dump() + " is not supported (expected " +
                 std::to_string(kFormatVersion) + "); upgrade flotilla-worker");
    impl->origin = doc.value("origin", std::string("trained"));
    for (const auto& s : doc.at("specials"))
      impl->specials.push_back({s.at("id").get<uint32_t>(), s.at("text").get<std::string>()});
    std::vector<uint8_t> is_special;
    const auto& tokens = doc.at("tokens");
    is_special.assign(tokens.size(), 0);
    for (const Special& s : impl->specials)
      if (s.id < is_special.size()) is_special[s.id] = 1;
    impl->tokens.reserve(tokens.size());
    for (size_t id = 0; id < tokens.size(); ++id) {
      const std::string text = tokens[id].get<std::string>();
      std::string bytes;
      if (!is_special[id] && !gpt2_text_to_bytes(text, &bytes))
        throw_data(where + "token " + std::to_string(id) + " ('" + text + "') is not in GPT-2 byte form");
      impl->tokens.push_back(is_special[id] ? text : bytes);
    }
    if (doc.contains("vocab_size") && doc.at("vocab_size").get<size_t>() != tokens.size())
      throw_data(where + "vocab_size " + doc.at("vocab_size").dump() +
                 " != " + std::to_string(tokens.size()) + " tokens listed; the file is damaged");
    for (const auto& m : doc.at("merges")) {
      if (!m.is_array() || m.size() != 3) throw_data(where + "each merge must be [left, right, result]");
      impl->merges.push_back({m[0].get<uint32_t>(), m[1].get<uint32_t>(), m[2].get<uint32_t>()});
    }
  } catch (const nlohmann::json::exception& e) {
    throw_data(where + "malformed (" + std::string(e.what()) + "); re-create it with tokenizer train");
  }
  impl->build_index(source_name);
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

void Tokenizer::save(const std::string& path) const { write_file_durably(path, to_json()); }

Tokenizer Tokenizer::load(const std::string& path_or_name) {
  namespace fs = std::filesystem;
  // A Hub name ("org/name"): the tokenizer files of its snapshot in the Hugging Face cache.
  const std::string path =
      interop::local_model_folder(path_or_name, "--tokenizer", interop::hub::FileSet::kTokenizer);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json", ec)) {
      const fs::path config = dir / "tokenizer_config.json";
      return load_hf((dir / "tokenizer.json").string(),
                     fs::exists(config, ec) ? config.string() : std::string());
    }
    if (fs::exists(dir / "vocab.json", ec))
      return load_gpt2((dir / "vocab.json").string(), (dir / "merges.txt").string());
    if (fs::exists(dir / kFolderFileName, ec)) {
      const std::string file = (dir / kFolderFileName).string();
      return from_json(read_file(file, "tokenizer"), file);
    }
    throw_data("tokenizer folder " + path + ": holds no tokenizer.json (Hugging Face), no vocab.json + " +
               "merges.txt (GPT-2) and no " + kFolderFileName + " (from 'tokenizer train')");
  }
  const std::string text = read_file(path, "tokenizer");
  bool ours = false, vocab_like = false, hf = false;
  try {
    const nlohmann::json doc = nlohmann::json::parse(text);
    ours = doc.is_object() && doc.contains("format");
    hf = doc.is_object() && !ours && doc.contains("model");
    vocab_like = doc.is_object() && !ours && !hf && !doc.empty() && doc.begin().value().is_number_integer();
  } catch (const nlohmann::json::exception& e) {
    throw_data("tokenizer " + path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (ours) return from_json(text, path);
  if (hf) {
    const fs::path config = fs::path(path).parent_path() / "tokenizer_config.json";
    std::string config_text;
    if (fs::path(path).filename() == "tokenizer.json" && fs::exists(config, ec))
      config_text = read_file(config.string(), "tokenizer_config.json");
    return from_hf_json(text, path, config_text, config.string());
  }
  if (vocab_like) {
    fs::path merges = fs::path(path).parent_path() / "merges.txt";
    return load_gpt2(path, merges.string());
  }
  throw_data("tokenizer " + path +
             ": neither a Flotilla tokenizer JSON, a Hugging Face tokenizer.json nor a " +
             "GPT-2 vocab.json; give a folder with tokenizer.json, or a file from 'tokenizer train'");
}

}  // namespace flotilla
