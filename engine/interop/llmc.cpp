// llm.c model .bin reader/writer (format in llmc.h).
#include "engine/interop/llmc.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/checkpoint/durable_io.h"
#include "engine/core/error.h"
#include "engine/interop/safetensors.h"

namespace flotilla::interop {
namespace {

constexpr size_t kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * 4;

class Fd {
 public:
  explicit Fd(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw_data(path + ": cannot open: " + errno_string(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_data(path_ + ": " + errno_string(errno));
    return static_cast<uint64_t>(st.st_size);
  }
  void read_exact(void* dst, size_t n) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::read(fd_, p, n);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) throw_data(path_ + ": file ended early or read failed");
      p += got;
      n -= static_cast<size_t>(got);
    }
  }
  void skip(uint64_t n) {
    if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) throw_data(path_ + ": seek failed");
  }

 private:
  std::string path_;
  int fd_;
};

// n values (fp32 or bf16 in the file) into dst as fp32, converting in bounded chunks.
void read_values(Fd& fd, bool bf16, float* dst, size_t n) {
  if (!bf16) {
    fd.read_exact(dst, n * sizeof(float));
    return;
  }
  std::vector<uint16_t> buf(std::min<size_t>(n, size_t{1} << 20));
  for (size_t done = 0; done < n;) {
    const size_t k = std::min(buf.size(), n - done);
    fd.read_exact(buf.data(), k * 2);
    for (size_t i = 0; i < k; ++i) dst[done + i] = bf16_to_f32(buf[i]);
    done += k;
  }
}

std::string dims_text(const ModelDims& d) {
  return "maxT " + std::to_string(d.max_seq_len) + ", V " + std::to_string(d.vocab_size) + ", L " +
         std::to_string(d.n_layer) + ", NH " + std::to_string(d.n_head) + ", C " + std::to_string(d.n_embd);
}

}  // namespace

LlmcHeader read_llmc_header(const std::string& path) {
  Fd fd(path);
  const uint64_t size = fd.size();
  if (size < kHeaderBytes)
    throw_data(path + ": " + std::to_string(size) + " bytes, too small for an llm.c model file");
  int32_t h[kHeaderInts];
  fd.read_exact(h, sizeof h);
  if (h[0] != kLlmcModelMagic)
    throw_data(path + ": bad magic " + std::to_string(h[0]) + " (an llm.c model file starts with " +
               std::to_string(kLlmcModelMagic) + ")");
  if (h[1] != kLlmcVersionF32 && h[1] != kLlmcVersionBf16)
    throw_data(path + ": llm.c model version " + std::to_string(h[1]) +
               " is not supported (3 = fp32, 5 = bf16)");
  LlmcHeader out;
  out.version = h[1];
  ModelDims& d = out.dims;
  d.max_seq_len = h[2];
  d.vocab_size = h[3];
  d.n_layer = h[4];
  d.n_head = h[5];
  d.n_embd = h[6];
  d.padded_vocab = h[7];
  const bool sane = d.max_seq_len > 0 && d.max_seq_len <= (1 << 20) && d.vocab_size > 0 &&
                    d.vocab_size <= (1 << 24) && d.n_layer > 0 && d.n_layer <= 1024 && d.n_head > 0 &&
                    d.n_embd > 0 && d.n_embd <= (1 << 16) && d.n_embd % d.n_head == 0 &&
                    d.padded_vocab >= d.vocab_size && d.padded_vocab <= (1 << 24);
  if (!sane)
    throw_data(path + ": implausible header (" + dims_text(d) + ", Vp " + std::to_string(d.padded_vocab) +
               ")");
  const uint64_t expect = kHeaderBytes + num_parameters(d) * (out.version == kLlmcVersionF32 ? 4 : 2);
  if (size != expect)
    throw_data(path + ": " + std::to_string(size) + " bytes, but its header (" + dims_text(d) + ") needs " +
               std::to_string(expect) + "; the file is truncated or not an llm.c model");
  return out;
}

std::vector<float> import_llmc(const std::string& path, const ModelDims& d) {
  const LlmcHeader h = read_llmc_header(path);
  const ModelDims& f = h.dims;
  if (f.max_seq_len != d.max_seq_len || f.vocab_size != d.vocab_size || f.n_layer != d.n_layer ||
      f.n_head != d.n_head || f.n_embd != d.n_embd)
    throw_data(path + ": the file's model (" + dims_text(f) + ") differs from the configured model (" +
               dims_text(d) + ")");
  const bool bf16 = h.version == kLlmcVersionBf16;
  const size_t C = static_cast<size_t>(d.n_embd), V = static_cast<size_t>(d.vocab_size);
  std::vector<float> params(num_parameters(d), 0.0f);
  Fd fd(path);
  fd.skip(kHeaderBytes);
  read_values(fd, bf16, params.data(), V * C);                                // wte real rows
  fd.skip((static_cast<uint64_t>(f.padded_vocab) - V) * C * (bf16 ? 2 : 4));  // the file's padded rows
  const size_t wte = static_cast<size_t>(d.padded_vocab) * C;
  read_values(fd, bf16, params.data() + wte, params.size() - wte);  // everything after wte
  return params;
}

void export_llmc(const std::string& path, const ModelDims& d, const float* params) {
  int32_t h[kHeaderInts] = {};
  h[0] = kLlmcModelMagic;
  h[1] = kLlmcVersionF32;
  h[2] = d.max_seq_len;
  h[3] = d.vocab_size;
  h[4] = d.n_layer;
  h[5] = d.n_head;
  h[6] = d.n_embd;
  h[7] = d.padded_vocab;
  const size_t n = num_parameters(d);
  ckpt::replace_file_durably(path, kHeaderBytes + n * 4, [&](ckpt::DurableWriter& w) {
    w.write(h, sizeof h);
    w.write(params, n * sizeof(float));
  });
}

}  // namespace flotilla::interop
