// `data prepare` implementation: stream documents through the tokenizer into a spool file, then
// split the spool into val and train shards.
//
// One non-obvious decision: tokens go to a uint32 spool file on disk first, because the val split
// (a fraction of the *total*) cannot be placed before the total is known, and holding a large
// corpus's tokens in memory is what this avoids. Text files are read and encoded in blocks cut
// only where pre-tokenization cannot change, so a file of any size streams with bounded memory.
#include "engine/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "engine/data/shard_map.h"

namespace flotilla {

namespace {

namespace fs = std::filesystem;

bool ascii_non_space(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x80 && u != ' ' && !(u >= 9 && u <= 13);
}

// Largest cut position in [from, limit] after which encoding the two halves separately gives the
// same ids as encoding the whole: just after a '\n' preceded and followed by ASCII non-space
// characters (the newline is then a piece of its own either way). Returns 0 when there is none.
size_t safe_cut(std::string_view text, size_t from, size_t limit) {
  if (text.size() < 3) return 0;
  for (size_t p = std::min(limit, text.size() - 1); p >= std::max<size_t>(from, 2); --p)
    if (text[p - 1] == '\n' && ascii_non_space(text[p - 2]) && ascii_non_space(text[p])) return p;
  return 0;
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

class Spool {
 public:
  explicit Spool(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "w+b")) {
    if (!file_) throw_io("cannot create the spool file " + path + ": " + errno_string(errno));
  }
  ~Spool() {
    file_.reset();
    std::remove(path_.c_str());
  }
  void append(const std::vector<uint32_t>& ids) {
    if (!ids.empty() && std::fwrite(ids.data(), sizeof(uint32_t), ids.size(), file_.get()) != ids.size())
      throw_io("cannot write the spool file " + path_ + " (disk full?): " + errno_string(errno));
    count_ += static_cast<int64_t>(ids.size());
  }
  int64_t count() const { return count_; }
  void rewind() {
    if (std::fflush(file_.get()) != 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0)
      throw_io("cannot reread the spool file " + path_ + ": " + errno_string(errno));
  }
  std::vector<uint32_t> read(int64_t n) {
    std::vector<uint32_t> out(static_cast<size_t>(n));
    if (n > 0 && std::fread(out.data(), sizeof(uint32_t), out.size(), file_.get()) != out.size())
      throw_io("cannot read the spool file " + path_);
    return out;
  }

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  int64_t count_ = 0;
};

void encode_text_file(const Tokenizer& tok, const std::string& path, size_t block_bytes, Spool& spool) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data("data prepare: cannot read " + path);
  std::string pending, block(std::max<size_t>(block_bytes, 16), '\0');
  std::vector<uint32_t> ids;
  for (;;) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    const size_t scanned = pending.size();
    pending.append(block.data(), got);
    if (got < block.size()) break;  // end of file
    // Search only the new bytes (and the two before them) for a cut: a file without newlines
    // stays linear.
    const size_t cut = safe_cut(pending, scanned > 2 ? scanned - 1 : 0, pending.size() - 1);
    if (cut == 0) continue;  // no safe place yet: keep reading
    ids.clear();
    tok.encode_append(std::string_view(pending).substr(0, cut), ids);
    spool.append(ids);
    pending.erase(0, cut);
  }
  if (in.bad()) throw_data("data prepare: read error in " + path);
  ids.clear();
  tok.encode_append(pending, ids);
  spool.append(ids);
}

int64_t encode_jsonl_file(const Tokenizer& tok, const std::string& path, const std::string& field,
                          Spool& spool) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data("data prepare: cannot read " + path);
  std::string line;
  std::vector<uint32_t> ids;
  int64_t line_no = 0, docs = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw_data("data prepare: " + path + " line " + std::to_string(line_no) + ": not valid JSON (" +
                 e.what() + ")");
    }
    if (!doc.is_object() || !doc.contains(field) || !doc[field].is_string())
      throw_data("data prepare: " + path + " line " + std::to_string(line_no) + ": no string field \"" +
                 field + "\"; name the text field with --text-field");
    ids.clear();
    ids.push_back(tok.eot_id());
    tok.encode_append(doc[field].get_ref<const std::string&>(), ids);
    spool.append(ids);
    ++docs;
  }
  return docs;
}

bool is_jsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

// Writes n tokens from the spool as balanced shards prefix_000.bin, prefix_001.bin, ...
std::vector<std::string> write_split(Spool& spool, int64_t n, int64_t shard_tokens, const fs::path& dir,
                                     const std::string& prefix, bool wide) {
  std::vector<std::string> files;
  if (n == 0) return files;
  const int64_t k = (n + shard_tokens - 1) / shard_tokens;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t size = n * (i + 1) / k - n * i / k;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%03lld.bin", prefix.c_str(), static_cast<long long>(i));
    const std::string path = (dir / name).string();
    write_shard(path, spool.read(size), wide);
    files.push_back(path);
  }
  return files;
}

}  // namespace

PrepareResult prepare_shards(const Tokenizer& tok, const PrepareOptions& opt,
                             const std::function<void(const std::string&)>& progress) {
  if (opt.inputs.empty()) throw_usage("data prepare: give at least one --input file");
  if (opt.out_dir.empty()) throw_usage("data prepare: --out DIR is required");
  if (!(opt.val_fraction >= 0 && opt.val_fraction < 1))
    throw_usage("data prepare: --val-fraction " + std::to_string(opt.val_fraction) + " must be in [0, 1)");
  if (opt.shard_tokens < 1 || opt.shard_tokens > INT32_MAX)
    throw_usage("data prepare: --shard-tokens must be between 1 and 2,147,483,647");
  std::error_code ec;
  const fs::path dir(opt.out_dir);
  fs::create_directories(dir, ec);
  if (ec) throw_io("data prepare: cannot create " + opt.out_dir + ": " + ec.message());
  // Old shards would be picked up by a train_*.bin glob alongside the new ones.
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && e.path().extension() == ".bin")
      old.push_back(e.path());
  }
  if (!old.empty() && !opt.force)
    throw_usage("data prepare: " + opt.out_dir + " already holds shards (" + old.front().filename().string() +
                ", ...); choose an empty --out or pass --force to replace them");
  for (const fs::path& p : old) fs::remove(p, ec);

  PrepareResult result;
  Spool spool((dir / ".prepare.spool.tmp").string());
  for (const std::string& path : opt.inputs) {
    const int64_t before = spool.count();
    if (is_jsonl(path)) {
      result.documents += encode_jsonl_file(tok, path, opt.text_field, spool);
    } else {
      spool.append({tok.eot_id()});
      encode_text_file(tok, path, opt.block_bytes, spool);
      ++result.documents;
    }
    if (progress) progress("tokenized " + path + ": " + group_digits(spool.count() - before) + " tokens");
  }
  const int64_t total = spool.count();
  int64_t n_val = opt.val_fraction > 0
                      ? std::max<int64_t>(1, std::llround(static_cast<double>(total) * opt.val_fraction))
                      : 0;
  if (total < 2 || total - n_val < 1)
    throw_data("data prepare: the inputs hold only " + group_digits(total) + " tokens: too few to split");
  const bool wide = tok.vocab_size() > 65536;
  result.token_bytes = wide ? 4 : 2;
  result.val_tokens = n_val;
  result.train_tokens = total - n_val;
  spool.rewind();
  result.val_files = write_split(spool, n_val, opt.shard_tokens, dir, "val", wide);
  result.train_files = write_split(spool, total - n_val, opt.shard_tokens, dir, "train", wide);
  return result;
}

}  // namespace flotilla
