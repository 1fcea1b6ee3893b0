// Reading a metrics file as it grows (runs/file_tail.h; moved from the app's MetricsTail test, now
// the runs layer's and the engine reader's): a torn last line is held until its newline arrives,
// records split across writes come out whole and in order with the bits they were written with,
// garbage lines are skipped and counted, CRLF and blank lines are tolerated, the file is followed
// by byte offset, a backlog drains in bounded reads, and a truncated file is read from the start.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "check.h"
#include "runs/file_tail.h"

using flotilla::MetricsRecord;
using flotilla::MetricsRecordType;
using flotilla::runs::FileTail;

namespace {

std::string step_line(int step, double loss) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"v\":1,\"type\":\"step\",\"rank\":0,\"step\":%d,\"loss\":%.17g}\n", step, loss);
  return buf;
}

void append(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::app | std::ios::binary);
  f << bytes;
}

void truncate_to(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::trunc | std::ios::binary);
  f << bytes;
}

uint64_t size_of(const std::string& path) { return std::filesystem::file_size(path); }

}  // namespace

int main() {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/runs_file_tail";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  {  // A torn last line is held until its newline arrives, and is not garbage.
    const std::string path = dir + "/torn.jsonl";
    const std::string two = step_line(1, 6.25) + step_line(2, 5.5);
    append(path, two.substr(0, two.size() - 7));
    FileTail tail(path);
    auto got = tail.poll();
    CHECK(got.size() == 1 && got[0].step().step == 1);
    CHECK(tail.offset() == step_line(1, 6.25).size());
    CHECK(tail.skipped_lines() == 0);
    append(path, two.substr(two.size() - 7));
    got = tail.poll();
    CHECK(got.size() == 1 && got[0].step().step == 2 && got[0].step().loss == 5.5f);
    CHECK(tail.offset() == two.size());
  }
  {  // Records written in pieces of any size come out whole, in order, with their bits.
    std::string all;
    for (int i = 1; i <= 50; ++i) all += step_line(i, static_cast<float>(10.0 / i));
    for (size_t chunk : {1u, 2u, 10u, 97u}) {
      const std::string path = dir + "/split-" + std::to_string(chunk) + ".jsonl";
      FileTail tail(path);
      std::vector<MetricsRecord> got;
      for (size_t at = 0; at < all.size(); at += chunk) {
        append(path, all.substr(at, chunk));
        for (auto& r : tail.poll()) got.push_back(std::move(r));
      }
      CHECK(got.size() == 50);
      for (int i = 0; i < 50 && i < static_cast<int>(got.size()); ++i) {
        CHECK(got[i].step().step == i + 1);
        CHECK(got[i].step().loss == static_cast<float>(10.0 / (i + 1)));
      }
      CHECK(tail.skipped_lines() == 0);
    }
  }
  {  // Garbage lines are skipped and counted; CRLF and blank lines are tolerated.
    const std::string path = dir + "/garbage.jsonl";
    append(path, step_line(1, 3.0) + "not json at all\n[1,2,3]\n{\"v\":1,\"type\":\"step\",\"step\":2,\"loss\":\n" +
                     "\"a string\"\n" + step_line(3, 2.0) +
                     "\n\n{\"v\":1,\"type\":\"event\",\"message\":\"a\"}\r\n  \n");
    FileTail tail(path);
    const auto got = tail.poll();
    CHECK(got.size() == 3);
    CHECK(got.size() == 3 && got[0].step().step == 1 && got[1].step().step == 3);
    CHECK(got.size() == 3 && got[2].type == MetricsRecordType::kEvent && got[2].event().message == "a");
    CHECK(tail.skipped_lines() == 4);
    CHECK(tail.record_count() == 3);
  }
  {  // Followed by byte offset as a worker appends; a missing file reads as empty.
    const std::string path = dir + "/follow.jsonl";
    FileTail tail(path);
    CHECK(tail.poll().empty() && tail.offset() == 0);
    append(path, step_line(1, 4.0) + "{\"v\":1,\"type\":\"step\",\"st");
    CHECK(tail.poll().size() == 1);
    CHECK(tail.poll().empty());  // nothing new; the torn line still held
    append(path, "ep\":2,\"loss\":3.5}\n");
    const auto got = tail.poll();
    CHECK(got.size() == 1 && got[0].step().loss == 3.5f);
    CHECK(tail.offset() == size_of(path));
    CHECK(tail.record_count() == 2);
  }
  {  // A backlog drains in bounded reads.
    const std::string path = dir + "/backlog.jsonl";
    std::string all;
    for (int i = 1; i <= 1000; ++i) all += step_line(i, 1.0 + i);
    append(path, all);
    FileTail tail(path);
    int polls = 0;
    size_t records = 0;
    for (size_t got = 1; polls < 10000 && got > 0; ++polls) {
      got = tail.poll(4096).size();
      records += got;
    }
    CHECK(records == 1000);
    CHECK_MSG(polls > static_cast<int>(all.size() / 4096), "%d polls",
              polls);  // never more than 4 KiB a poll
    CHECK(tail.offset() == all.size());
  }
  {  // A file shorter than the offset was replaced: read from the start.
    const std::string path = dir + "/truncated.jsonl";
    append(path, step_line(1, 2.0) + step_line(2, 1.0));
    FileTail tail(path);
    CHECK(tail.poll().size() == 2);
    truncate_to(path, step_line(7, 0.5));
    const auto got = tail.poll();
    CHECK(got.size() == 1 && got[0].step().step == 7);
  }
  return flotilla_test::summary("test_file_tail");
}
