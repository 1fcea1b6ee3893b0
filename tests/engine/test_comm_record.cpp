// The `comm` metrics record's writer and reader (issue 36; docs/metrics-protocol.md "comm"): what
// MetricsWriter::comm writes is read back as the same CommRecord, and flattened into exactly the
// store's names (comm/step_ms, comm/steps, comm/<group>/size, comm/<group>/<op>/count|bytes|ms|
// wait_ms) that runs/comm_efficiency.cpp reads; a group or op whose name would break those names
// (a '/', empty) is left out.
#include <unistd.h>

#include <fstream>
#include <map>

#include "check.h"
#include "engine/train/comm_meter.h"
#include "engine/train/metrics_reader.h"
#include "worker_run.h"

using namespace flotilla_test;
using flotilla::MetricsRecord;
using flotilla::MetricsRecordType;

int main() {
  const std::string dir = fresh_dir("comm_record");
  const std::string path = dir + "/metrics.jsonl";
  {
    flotilla::MetricsWriter w(path, false, 0);
    flotilla::CommRecord c;
    c.step = 40;
    c.steps = 10;
    c.step_ms = 1043.25;
    flotilla::CommGroupRecord dp;
    dp.group = "dp";
    dp.size = 2;
    dp.ops.push_back({"all_reduce", 25, 12582912, 830.5, 120.25});
    dp.ops.push_back({"all_gather", 1, 4096, 2.5, 2.5});
    flotilla::CommGroupRecord pp;
    pp.group = "pp";
    pp.size = 2;
    pp.ops.push_back({"send_recv", 4, 65536, 9, 3});
    c.groups = {dp, pp};
    w.comm(c);
  }
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  MetricsRecord r;
  CHECK(flotilla::parse_metrics_line(line, r, flotilla::ParseOptions{true}) ==
        flotilla::ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kComm);
  CHECK(std::string(flotilla::to_string(r.type)) == "comm");
  CHECK(r.rank == 0 && r.time > 0);
  CHECK(r.step_number() == 40);
  if (r.type == MetricsRecordType::kComm) {
    const flotilla::CommRecord& c = r.comm();
    CHECK(c.step == 40 && c.steps == 10);
    CHECK(c.step_ms == 1043.25);
    CHECK(c.groups.size() == 2);
    if (c.groups.size() == 2) {
      CHECK(c.groups[0].group == "dp" && c.groups[0].size == 2 && c.groups[0].ops.size() == 2);
      CHECK(c.groups[1].group == "pp" && c.groups[1].ops.size() == 1 && c.groups[1].ops[0].op == "send_recv");
      // Ops come back in name order (the reader's JSON objects are sorted): all_gather, all_reduce.
      CHECK(c.groups[0].ops[1].op == "all_reduce" && c.groups[0].ops[1].bytes == 12582912 &&
            c.groups[0].ops[1].wait_ms == 120.25);
    }
  }
  std::map<std::string, double> names(r.numbers.begin(), r.numbers.end());
  CHECK(names.size() == r.numbers.size());  // no name twice
  const std::map<std::string, double> expected = {
      {"comm/step_ms", 1043.25},
      {"comm/steps", 10},
      {"comm/dp/size", 2},
      {"comm/dp/all_reduce/count", 25},
      {"comm/dp/all_reduce/bytes", 12582912},
      {"comm/dp/all_reduce/ms", 830.5},
      {"comm/dp/all_reduce/wait_ms", 120.25},
      {"comm/dp/all_gather/count", 1},
      {"comm/dp/all_gather/bytes", 4096},
      {"comm/dp/all_gather/ms", 2.5},
      {"comm/dp/all_gather/wait_ms", 2.5},
      {"comm/pp/size", 2},
      {"comm/pp/send_recv/count", 4},
      {"comm/pp/send_recv/bytes", 65536},
      {"comm/pp/send_recv/ms", 9},
      {"comm/pp/send_recv/wait_ms", 3},
  };
  CHECK(names == expected);

  // Names that would break comm/<group>/<op>/<field> are left out; the rest of the record stays.
  MetricsRecord h;
  CHECK(
      flotilla::parse_metrics_line(
          "{\"v\":1,\"type\":\"comm\",\"time\":1,\"rank\":0,\"step\":2,\"steps\":1,\"step_ms\":5,\"groups\":{"
          "\"d/p\":{\"size\":2,\"ops\":{\"all_reduce\":{\"count\":1,\"bytes\":8,\"ms\":1,\"wait_ms\":1}}},"
          "\"\":{\"size\":2},\"tp\":{\"size\":2,\"ops\":{\"a/b\":{\"count\":1},\"all_reduce\":{\"count\":2,"
          "\"bytes\":16,\"ms\":1,\"wait_ms\":0}}},\"pp\":7}}",
          h, flotilla::ParseOptions{true}) == flotilla::ParseStatus::kRecord);
  CHECK(h.type == MetricsRecordType::kComm);
  if (h.type == MetricsRecordType::kComm) {
    CHECK(h.comm().groups.size() == 1 && h.comm().groups[0].group == "tp");
    CHECK(h.comm().groups.size() == 1 && h.comm().groups[0].ops.size() == 1);
  }
  for (const auto& [n, v] : h.numbers)
    CHECK_MSG(n.find("d/p") == std::string::npos && n.find("a/b") == std::string::npos, "%s", n.c_str());

  // The protocol's op names: send/recv is send_recv in the record.
  CHECK(std::string(flotilla::CommMeter::record_op_name(flotilla::comm::OpKind::kSendRecv)) == "send_recv");
  CHECK(std::string(flotilla::CommMeter::record_op_name(flotilla::comm::OpKind::kReduceScatter)) ==
        "reduce_scatter");
  // An empty meter (a one-rank run) has nothing to write.
  flotilla::CommMeter meter;
  meter.add_group(nullptr);
  CHECK(meter.empty());
  return summary("test_comm_record");
}
