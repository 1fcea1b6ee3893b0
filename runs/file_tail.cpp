// A metrics file read by byte offset (see file_tail.h).
#include "runs/file_tail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace flotilla::runs {

std::vector<MetricsRecord> FileTail::poll(size_t max_bytes) {
  std::vector<MetricsRecord> out;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0) {
    if (static_cast<uint64_t>(st.st_size) < offset_) offset_ = 0;  // replaced by a shorter file
    const uint64_t want = std::min<uint64_t>(static_cast<uint64_t>(st.st_size) - offset_, max_bytes);
    text.resize(want);
    const ssize_t got = want ? ::pread(fd, text.data(), want, static_cast<off_t>(offset_)) : 0;
    text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  }
  ::close(fd);
  const size_t last_nl = text.rfind('\n');
  if (last_nl == std::string::npos) return out;  // no complete line yet
  text.resize(last_nl + 1);
  offset_ += text.size();
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    MetricsRecord r;
    switch (parse_metrics_line(std::string_view(text).substr(start, nl - start), r)) {
      case ParseStatus::kRecord:
        out.push_back(std::move(r));
        ++records_;
        break;
      case ParseStatus::kBlank:
        break;
      default:
        ++skipped_;
        break;
    }
    start = nl + 1;
  }
  return out;
}

}  // namespace flotilla::runs
