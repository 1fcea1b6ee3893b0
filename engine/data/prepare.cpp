// `data prepare` implementation: stream documents through the tokenizer into a spool file, then
// split the spool into val and train shards.
//
// One non-obvious decision: tokens (and a flag byte per token) go to spool files on disk first,
// because the val split (a fraction of the *total*) cannot be placed before the total is known,
// and whether the shards are llm.c's or labeled is known only once every record was read; holding
// a large corpus's tokens in memory is what this avoids. Text files are read and encoded in blocks
// cut only where pre-tokenization cannot change, so a file of any size streams with bounded memory.
#include "engine/data/prepare.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "engine/data/records.h"
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

// One temporary file of fixed-size items.
class SpoolFile {
 public:
  SpoolFile(const std::string& path, size_t item)
      : path_(path), item_(item), file_(std::fopen(path.c_str(), "w+b")) {
    if (!file_) throw_io("cannot create the spool file " + path + ": " + errno_string(errno));
  }
  ~SpoolFile() {
    file_.reset();
    std::remove(path_.c_str());
  }
  void append(const void* data, size_t n) {
    if (n > 0 && std::fwrite(data, item_, n, file_.get()) != n)
      throw_io("cannot write the spool file " + path_ + " (disk full?): " + errno_string(errno));
  }
  void rewind() {
    if (std::fflush(file_.get()) != 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0)
      throw_io("cannot reread the spool file " + path_ + ": " + errno_string(errno));
  }
  void read(void* out, size_t n) {
    if (n > 0 && std::fread(out, item_, n, file_.get()) != n) throw_io("cannot read the spool file " + path_);
  }

 private:
  std::string path_;
  size_t item_;
  std::unique_ptr<std::FILE, FileCloser> file_;
};

// Tokens, their flags and the document starts of everything read so far.
class Spool {
 public:
  explicit Spool(const fs::path& dir)
      : tokens_((dir / ".prepare.spool.tmp").string(), 4), flags_((dir / ".prepare.flags.tmp").string(), 1) {}
  void begin_document() {
    if (starts_.empty() || starts_.back() != count_)
      starts_.push_back(count_);  // an empty document merges away
  }
  // Appends ids with the given target flags (all targets when target is null).
  void append(const std::vector<uint32_t>& ids, const std::vector<uint8_t>* target) {
    flag_buf_.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t at = count_ + static_cast<int64_t>(i);
      const bool start = !starts_.empty() && starts_.back() == at;
      flag_buf_[i] = static_cast<uint8_t>(start                       ? kFlagDocStart
                                          : (!target || (*target)[i]) ? kFlagTarget
                                                                      : 0);
    }
    tokens_.append(ids.data(), ids.size());
    flags_.append(flag_buf_.data(), ids.size());
    count_ += static_cast<int64_t>(ids.size());
  }
  int64_t count() const { return count_; }
  const std::vector<int64_t>& starts() const { return starts_; }
  void rewind() {
    tokens_.rewind();
    flags_.rewind();
  }
  void read(int64_t n, std::vector<uint32_t>& ids, std::vector<uint8_t>& flags) {
    ids.resize(static_cast<size_t>(n));
    flags.resize(static_cast<size_t>(n));
    tokens_.read(ids.data(), ids.size());
    flags_.read(flags.data(), flags.size());
  }

 private:
  SpoolFile tokens_, flags_;
  std::vector<int64_t> starts_;
  std::vector<uint8_t> flag_buf_;
  int64_t count_ = 0;
};

// One text file as one document: what append_text_document gives, in bounded memory.
void encode_text_file(const Tokenizer& tok, const std::string& path, size_t block_bytes, Spool& spool) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data("data prepare: cannot read " + path);
  const bool hf = tok.origin() == "tokenizer.json";
  std::vector<uint32_t> ids;
  int64_t last = -1;  // the document's last token so far
  auto append = [&] {
    if (!ids.empty()) last = ids.back();
    spool.append(ids, nullptr);
  };
  spool.begin_document();
  ids = hf ? tok.template_prefix() : std::vector<uint32_t>{tok.eot_id()};
  append();
  const bool streaming = tok.can_cut_at_newlines();
  std::string pending, block(std::max<size_t>(block_bytes, 16), '\0');
  for (;;) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    const size_t scanned = pending.size();
    pending.append(block.data(), got);
    if (got < block.size()) break;  // end of file
    if (!streaming) continue;
    // Search only the new bytes (and the two before them) for a cut: a file without newlines
    // stays linear.
    const size_t cut = safe_cut(pending, scanned > 2 ? scanned - 1 : 0, pending.size() - 1);
    if (cut == 0) continue;  // no safe place yet: keep reading
    ids.clear();
    tok.encode_append(std::string_view(pending).substr(0, cut), hf, ids, nullptr);
    append();
    pending.erase(0, cut);
  }
  if (in.bad()) throw_data("data prepare: read error in " + path);
  ids.clear();
  tok.encode_append(pending, hf, ids, nullptr);
  if (hf) {  // tokenizer(text) then EOS, as append_text_document
    ids.insert(ids.end(), tok.template_suffix().begin(), tok.template_suffix().end());
    const uint32_t eot = tok.eot_id();
    if ((ids.empty() ? last : static_cast<int64_t>(ids.back())) != static_cast<int64_t>(eot))
      ids.push_back(eot);
  }
  append();
}

void encode_jsonl_file(const std::string& path, const std::string& field, RecordTokenizer& records,
                       PrepareResult& result, Spool& spool) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data("data prepare: cannot read " + path);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "data prepare: " + path + " line " + std::to_string(line_no);
    const Record rec = parse_record(line, field, where);
    const LabeledDocument doc = records.tokenize(rec, where);
    spool.begin_document();
    spool.append(doc.ids, &doc.target);
    ++result.documents;
    ++(rec.kind == RecordKind::kChat         ? result.chat_records
       : rec.kind == RecordKind::kCompletion ? result.completion_records
                                             : result.text_records);
  }
}

bool is_jsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// kPrepareIncompleteFile, durable before any shard changes: "pid P" (check_prepare_finished tells a
// prepare still running from an interrupted one by it).
void write_prepare_marker(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io("data prepare: cannot create " + path + ": " + errno_string(errno));
  const std::string text = "pid " + std::to_string(::getpid()) + "\n";
  const bool ok =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw_io("data prepare: cannot write " + path + ": " + errno_string(err));
  fsync_dir(fs::path(path).parent_path());
}

// Every shard is in place (each renamed and its folder fsynced by write_shard): the set is whole.
void finish_prepare(const std::string& marker) {
  if (::unlink(marker.c_str()) != 0 && errno != ENOENT)
    throw_io("data prepare: cannot remove " + marker + ": " + errno_string(errno));
  fsync_dir(fs::path(marker).parent_path());
}

// Test hook (FLOTILLA_TEST_PREPARE_KILL_AFTER_SHARDS=k): SIGKILL after the k-th shard is in place,
// a kill in the write phase at a known point.
void after_shard_written() {
  static int written = 0;
  static const char* env = std::getenv("FLOTILLA_TEST_PREPARE_KILL_AFTER_SHARDS");
  if (env && ++written == std::atoi(env)) ::raise(SIGKILL);
}

std::string shard_name(const fs::path& dir, const std::string& prefix, int64_t i) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%03lld.bin", prefix.c_str(), static_cast<long long>(i));
  return (dir / name).string();
}

// Writes n tokens from the spool as balanced llm.c shards prefix_000.bin, prefix_001.bin, ...
std::vector<std::string> write_split(Spool& spool, int64_t n, int64_t shard_tokens, const fs::path& dir,
                                     const std::string& prefix, bool wide, int seq_len, int64_t* rows) {
  std::vector<std::string> files;
  if (n == 0) return files;
  const int64_t k = (n + shard_tokens - 1) / shard_tokens;
  std::vector<uint32_t> ids;
  std::vector<uint8_t> flags;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t size = n * (i + 1) / k - n * i / k;
    spool.read(size, ids, flags);
    const std::string path = shard_name(dir, prefix, i);
    write_shard(path, ids, wide);
    after_shard_written();
    if (seq_len > 0) *rows += (size - 1) / seq_len;
    files.push_back(path);
  }
  return files;
}

// Writes documents [first_doc, end_doc) as labeled shards of about equal size, cut at document
// starts, at most shard_tokens tokens each unless one document alone is longer.
std::vector<std::string> write_labeled_split(Spool& spool, size_t first_doc, size_t end_doc,
                                             int64_t shard_tokens, const fs::path& dir,
                                             const std::string& prefix, bool wide, const PrepareOptions& opt,
                                             uint32_t pad, int64_t* targets, int64_t* rows,
                                             int64_t* split_docs) {
  std::vector<std::string> files;
  const std::vector<int64_t>& starts = spool.starts();
  if (first_doc >= end_doc) return files;
  const int64_t begin = starts[first_doc];
  const int64_t end = end_doc < starts.size() ? starts[end_doc] : spool.count();
  const int64_t n = end - begin, k = (n + shard_tokens - 1) / shard_tokens;
  std::vector<uint32_t> ids;
  std::vector<uint8_t> flags;
  size_t doc = first_doc;
  for (int64_t i = 0; i < k && doc < end_doc; ++i) {
    const int64_t from = starts[doc];
    const int64_t goal = begin + n * (i + 1) / k;
    size_t next = doc + 1;
    while (next < end_doc && starts[next] < goal) ++next;
    if (i + 1 == k) next = end_doc;
    const int64_t to = next < starts.size() ? starts[next] : spool.count();
    spool.read(to - from, ids, flags);
    const std::string path = shard_name(dir, prefix, static_cast<int64_t>(files.size()));
    write_labeled_shard(path, ids, flags, opt.pack, pad, wide);
    after_shard_written();
    for (uint8_t f : flags) *targets += (f & kFlagTarget) != 0;
    if (opt.seq_len > 0) {
      std::vector<int64_t> local;
      for (size_t d = doc; d < next; ++d) local.push_back(starts[d] - from);
      const PackPlan plan = plan_rows(local, to - from, opt.seq_len, opt.pack);
      *rows += plan.rows();
      *split_docs += plan.split_documents;
    }
    files.push_back(path);
    doc = next;
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
  if (opt.seq_len < 0) throw_usage("data prepare: --seq-len must be positive");
  if (opt.val_rows < 0) throw_usage("data prepare: --val-rows must be positive");
  if (opt.val_rows > 0 && opt.seq_len == 0)
    throw_usage("data prepare: --val-rows counts rows of --seq-len tokens: give --seq-len too");
  std::optional<ChatFormat> format;
  if (!opt.chat_format.empty()) {
    ChatFormat f;
    if (!parse_chat_format(opt.chat_format, &f))
      throw_usage("data prepare: --chat-format " + opt.chat_format +
                  " is not one of llama3, chatml, qwen3, plain");
    format = f;
  }
  std::error_code ec;
  const fs::path dir(opt.out_dir);
  fs::create_directories(dir, ec);
  if (ec) throw_io("data prepare: cannot create " + opt.out_dir + ": " + ec.message());
  // Old shards would be picked up by a train_*.bin glob alongside the new ones.
  std::vector<fs::path> old, partial;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("train_", 0) != 0 && name.rfind("val_", 0) != 0) continue;
    if (e.path().extension() == ".bin")
      old.push_back(e.path());
    else if (name.find(".bin.tmp.") != std::string::npos)
      partial.push_back(e.path());  // a shard a killed prepare was writing
  }
  const std::string marker = (dir / kPrepareIncompleteFile).string();
  if (!old.empty() && !opt.force) {
    if (fs::exists(marker, ec))
      throw_usage("data prepare: " + opt.out_dir + " holds an interrupted prepare (" +
                  std::to_string(old.size()) + " shard(s) of a data set that was never finished, e.g. " +
                  old.front().filename().string() + "; " + marker +
                  " is still there); pass --force to replace them");
    throw_usage("data prepare: " + opt.out_dir + " already holds shards (" + old.front().filename().string() +
                ", ...); choose an empty --out or pass --force to replace them");
  }
  // Marked incomplete before the first shard changes, unmarked after the last is in place: a
  // prepare killed in between leaves a folder that inspect and training refuse
  // (check_prepare_finished), not a shorter data set that looks whole.
  write_prepare_marker(marker);
  for (const fs::path& p : old) fs::remove(p, ec);
  for (const fs::path& p : partial) fs::remove(p, ec);

  PrepareResult result;
  Spool spool(dir);
  RecordTokenizer records(tok, format);
  for (const std::string& path : opt.inputs) {
    const int64_t before = spool.count();
    if (is_jsonl(path)) {
      encode_jsonl_file(path, opt.text_field, records, result, spool);
    } else {
      encode_text_file(tok, path, opt.block_bytes, spool);
      ++result.documents;
      ++result.text_records;
    }
    if (progress) progress("tokenized " + path + ": " + group_digits(spool.count() - before) + " tokens");
  }
  if (records.chat_format()) result.chat_format = chat_format_name(*records.chat_format());
  const int64_t total = spool.count();
  result.labeled = opt.documents || result.chat_records > 0 || result.completion_records > 0;
  const bool wide = tok.vocab_size() > 65536;
  result.token_bytes = wide ? 4 : 2;
  spool.rewind();
  if (!result.labeled) {
    int64_t n_val = opt.val_fraction > 0
                        ? std::max<int64_t>(1, std::llround(static_cast<double>(total) * opt.val_fraction))
                        : 0;
    if (opt.val_rows > 0) n_val = opt.val_rows * opt.seq_len + 1;  // val_rows windows of T + 1 tokens
    if (opt.val_rows > 0 && total - n_val < static_cast<int64_t>(opt.seq_len) + 1)
      throw_data("data prepare: the inputs hold " + group_digits(total) + " tokens; " +
                 group_digits(opt.val_rows) + " validation rows of " + std::to_string(opt.seq_len) +
                 " tokens take " + group_digits(n_val) +
                 ", leaving less than one row to train on; add data, ask for fewer validation rows "
                 "or use no validation");
    if (total < 2 || total - n_val < 1)
      throw_data("data prepare: the inputs hold only " + group_digits(total) + " tokens: too few to split");
    result.val_tokens = n_val;
    result.train_tokens = total - n_val;
    result.val_targets = std::max<int64_t>(0, n_val - 1);
    result.train_targets = result.train_tokens - 1;
    result.val_documents = result.train_documents = 0;
    result.val_files =
        write_split(spool, n_val, opt.shard_tokens, dir, "val", wide, opt.seq_len, &result.val_rows);
    result.train_files = write_split(spool, total - n_val, opt.shard_tokens, dir, "train", wide, opt.seq_len,
                                     &result.train_rows);
    finish_prepare(marker);
    return result;
  }
  // Labeled: the val split is the first documents holding about val_fraction of the tokens.
  const std::vector<int64_t>& starts = spool.starts();
  const size_t docs = starts.size();
  size_t n_val_docs = 0;
  if (opt.val_rows > 0 && docs > 0) {
    // The fewest leading documents whose rows reach val_rows: rows grow with each document added,
    // so a binary search over the count finds it.
    auto rows_of = [&](size_t k) {
      const int64_t end = k < docs ? starts[k] : total;
      return plan_rows(std::vector<int64_t>(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(k)),
                       end, opt.seq_len, opt.pack)
          .rows();
    };
    size_t lo = 1, hi = docs;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (rows_of(mid) >= opt.val_rows)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo >= docs || rows_of(lo) < opt.val_rows)
      throw_data("data prepare: the inputs hold " + std::to_string(docs) +
                 (docs == 1 ? " document (" : " documents (") + group_digits(total) +
                 " tokens), fewer than " + group_digits(opt.val_rows) +
                 " validation rows of T + 1 = " + std::to_string(opt.seq_len + 1) +
                 " tokens and a training split after them; add data, ask for fewer validation rows "
                 "(a smaller batch) or use no validation");
    n_val_docs = lo;
  } else if (opt.val_fraction > 0) {
    const int64_t goal = std::max<int64_t>(1, std::llround(static_cast<double>(total) * opt.val_fraction));
    while (n_val_docs < docs && starts[n_val_docs] < goal) ++n_val_docs;
    n_val_docs = std::max<size_t>(n_val_docs, 1);
  }
  if (docs == 0 || total < 2 || n_val_docs >= docs)
    throw_data("data prepare: the inputs hold only " + std::to_string(docs) + " document(s) (" +
               group_digits(total) +
               " tokens): too few to split into val and train; add data or use "
               "--val-fraction 0");
  const uint32_t pad = tok.pad_id().value_or(tok.eos_id().value_or(0));
  result.val_documents = static_cast<int64_t>(n_val_docs);
  result.train_documents = static_cast<int64_t>(docs - n_val_docs);
  result.val_tokens = n_val_docs < docs ? starts[n_val_docs] : total;
  result.train_tokens = total - result.val_tokens;
  result.val_files = write_labeled_split(spool, 0, n_val_docs, opt.shard_tokens, dir, "val", wide, opt, pad,
                                         &result.val_targets, &result.val_rows, &result.split_documents);
  result.train_files =
      write_labeled_split(spool, n_val_docs, docs, opt.shard_tokens, dir, "train", wide, opt, pad,
                          &result.train_targets, &result.train_rows, &result.split_documents);
  finish_prepare(marker);
  return result;
}

}  // namespace flotilla
