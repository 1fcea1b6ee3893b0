// The typed metrics-protocol reader against its writer: every record MetricsWriter writes reads
// back with the same values (a loss with the same float32 bits), the step record flattens to the
// store's metric names (a task record's scores as task/<task>/<score>), torn lines wait for their end in any
// chunking, and bad lines, other versions and unknown types are told apart.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/train/metrics.h"
#include "engine/train/metrics_reader.h"

using namespace flotilla;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

double number(const MetricsRecord& r, const std::string& name) {
  for (const auto& [n, v] : r.numbers)
    if (n == name) return v;
  return -12345;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

int main() {
  const std::filesystem::path dir = std::filesystem::path(FLOTILLA_TEST_TMP) / "metrics_reader";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "metrics.jsonl").string();
  const float odd_loss = 5.87213134765625f + 1e-6f;  // a value whose bits a short print would lose
  {
    MetricsWriter w(path, false, 0);
    w.run_start("demo", R"({"train":{"steps":40},"budget":{"usd_per_hour":36}})", 2, 16287488, 1.2e8, 10,
                "/runs/demo/checkpoints/step-00000010", 123456);
    StepRecord s;
    s.step = 11;
    s.tokens = 24576;
    s.loss = odd_loss;
    s.lr = 3e-4;
    s.grad_norm = 1.93f;
    s.tokens_per_s = 40211;
    s.mfu = 0.41;
    s.step_ms = 50.9;
    s.forward_ms = 17.2;
    s.comm_ms = 2.5;
    s.peak_rss_bytes = 171245568;
    s.skipped = true;
    s.ranks = {{0.1f, 17.2f, 30.1f, 3.4f, 0.5f, 51.0f, 0.0f}, {0.1f, 17.0f, 30.0f, 3.3f, 9.5f, 60.0f, 1.0f}};
    s.gpus = {GpuRecord{1, 1000, 8000}};
    w.step(s);
    w.eval(EvalRecord{11, 24576, 4.25f, 4});
    w.checkpoint(CheckpointRecord{11, "/runs/demo/checkpoints/step-00000011", 1048576, 0.25, "request"});
    w.sample(11, {1, 2, 3}, "hello");
    w.event("warning", "loss spike", {{"code", "spike"}});
    w.summary(12, 26000, 4.5f, 0.0f, 12.5, 40000, 0.4, "stopped");
  }
  const std::vector<std::string> lines = lines_of(path);
  CHECK(lines.size() == 7);

  MetricsRecord r;
  CHECK(parse_metrics_line(lines[0], r) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kRunStart);
  CHECK(r.time > 1.6e9);
  CHECK(r.run_start().run == "demo");
  CHECK(r.run_start().world_size == 2);
  CHECK(r.run_start().parameters == 16287488);
  CHECK(r.run_start().start_step == 10);
  CHECK(r.run_start().planned_steps == 40);
  CHECK(r.run_start().resumed_from == "/runs/demo/checkpoints/step-00000010");
  CHECK(r.run_start().pid > 0);
  CHECK(r.run_start().baseline_rss_bytes == 123456);
  CHECK(r.run_start().config_json.find("\"usd_per_hour\":36") != std::string::npos);

  CHECK(parse_metrics_line(lines[1], r, ParseOptions{true}) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kStep);
  const StepRecord& s = r.step();
  CHECK(s.step == 11 && r.step_number() == 11);
  CHECK(bits(s.loss) == bits(odd_loss));  // round-trips exactly, as the writer promises
  CHECK(s.tokens == 24576);
  CHECK_NEAR(s.forward_ms, 17.2, 1e-12);
  CHECK_NEAR(s.comm_ms, 2.5, 1e-12);
  CHECK(s.peak_rss_bytes == 171245568);
  CHECK(s.skipped);
  CHECK(s.ranks.size() == 2 && s.ranks[1][4] == 9.5f && s.ranks[1][6] == 1.0f);
  CHECK(r.slowest_rank == 1);
  CHECK(s.gpus.size() == 1 && s.gpus[0].device == 1 && s.gpus[0].mem_total_bytes == 8000);
  // Flattened as the store names its metrics: top level and one level down, booleans as 0/1.
  CHECK(number(r, "loss") == static_cast<double>(odd_loss));
  CHECK(number(r, "time_ms.forward") == 17.2);
  CHECK(number(r, "skipped") == 1.0);
  CHECK(number(r, "slowest_rank") == 1.0);
  CHECK(number(r, "step") == -12345 && number(r, "time") == -12345 && number(r, "rank") == -12345);
  CHECK(number(r, "ranks") == -12345);  // arrays are not metrics

  CHECK(parse_metrics_line(lines[2], r, ParseOptions{true}) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kEval && r.eval().val_loss == 4.25f && r.eval().batches == 4);
  CHECK(r.numbers.size() == 1 && number(r, "val_loss") == 4.25);
  CHECK(parse_metrics_line(lines[3], r) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kCheckpoint && r.checkpoint().reason == "request" &&
        r.checkpoint().bytes == 1048576 && r.checkpoint().dir.find("step-00000011") != std::string::npos);
  CHECK(parse_metrics_line(lines[4], r) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kSample && r.sample().text == "hello" && r.sample().tokens.size() == 3);
  CHECK(parse_metrics_line(lines[5], r) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kEvent && r.event().level == "warning" && r.event().message == "loss spike");
  CHECK(r.event().fields_json == R"({"code":"spike"})");
  CHECK(parse_metrics_line(lines[6], r) == ParseStatus::kRecord);
  CHECK(r.type == MetricsRecordType::kSummary && r.summary().exit == "stopped" && r.summary().steps == 12);
  CHECK(!r.summary().best_val_loss);  // written as null

  // The task record (eval.tasks): the writer's line as docs/metrics-protocol.md shows it, its
  // scores read back exactly and flattened under their store names task/<task>/<score>.
  {
    const std::string task_path = (dir / "task.jsonl").string();
    {
      MetricsWriter w(task_path, false, 0);
      TaskRecord t;
      t.step = 20;
      t.tokens = 40960;
      t.task = "arc-mini";
      t.kind = "multiple_choice";
      t.scores = {{"acc", 0.3125},
                  {"acc_norm", 0.35},
                  {"acc_norm_stderr", 0.1094},
                  {"acc_stderr", 0.1197},
                  {"n", 20}};
      t.seconds = 1.9;
      w.task(t);
    }
    const std::vector<std::string> tl = lines_of(task_path);
    CHECK(tl.size() == 1);
    CHECK_MSG(tl.at(0).find(R"("type":"task")") != std::string::npos &&
                  tl.at(0).find(R"("step":20,"tokens":40960,"task":"arc-mini","kind":"multiple_choice",)"
                                R"("scores":{"acc":0.3125,"acc_norm":0.35,)") != std::string::npos,
              "%s", tl.at(0).c_str());
    CHECK(parse_metrics_line(tl.at(0), r, ParseOptions{true}) == ParseStatus::kRecord);
    CHECK(r.type == MetricsRecordType::kTask && r.step_number() == 20 &&
          to_string(r.type) == std::string("task"));
    CHECK(r.task().task == "arc-mini" && r.task().kind == "multiple_choice" && r.task().tokens == 40960);
    CHECK(r.task().scores.size() == 5 && r.task().scores[1].first == "acc_norm" &&
          r.task().scores[1].second == 0.35);
    CHECK_NEAR(r.task().seconds, 1.9, 1e-12);
    CHECK(r.numbers.size() == 5 && number(r, "task/arc-mini/acc_norm") == 0.35 &&
          number(r, "task/arc-mini/n") == 20);
    // A task record needs its task and its scores; a null score is left out.
    CHECK(parse_metrics_line(R"({"v":1,"type":"task","step":3,"task":"a"})", r) == ParseStatus::kBad);
    CHECK(parse_metrics_line(R"({"v":1,"type":"task","step":3,"scores":{}})", r) == ParseStatus::kBad);
    CHECK(parse_metrics_line(R"({"v":1,"type":"task","step":3,"task":"a","scores":{"acc":null,"n":4}})", r,
                             ParseOptions{true}) == ParseStatus::kRecord);
    CHECK(r.task().scores.size() == 1 && r.numbers.size() == 1 && number(r, "task/a/n") == 4);
  }

  // What readers must skip, told apart.
  std::string why;
  CHECK(parse_metrics_line("", r) == ParseStatus::kBlank);
  CHECK(parse_metrics_line(" \r", r) == ParseStatus::kBlank);
  CHECK(parse_metrics_line("{\"v\":1,\"type\":\"step\"", r, {}, &why) == ParseStatus::kBad && why == "not JSON");
  CHECK(parse_metrics_line("[1,2]", r, {}, &why) == ParseStatus::kBad);
  CHECK(parse_metrics_line("{\"type\":\"step\"}", r) == ParseStatus::kBad);
  CHECK(parse_metrics_line("{\"v\":1,\"type\":\"eval\",\"step\":3}", r) == ParseStatus::kBad);
  CHECK(parse_metrics_line("{\"v\":2,\"type\":\"step\",\"step\":3}", r) == ParseStatus::kOtherVersion);
  CHECK(parse_metrics_line("{\"v\":1,\"type\":\"telemetry\"}", r) == ParseStatus::kUnknownType);
  CHECK(parse_metrics_line(lines[1] + "\r", r) == ParseStatus::kRecord);  // CRLF tolerated
  // A hostile rank number does not allocate: the entry is ignored.
  CHECK(parse_metrics_line(R"({"v":1,"type":"step","step":1,"ranks":[{"rank":99999999999}]})", r) ==
        ParseStatus::kRecord);
  CHECK(r.step().ranks.empty());

  // Lines come out whole in any chunking; the torn tail waits for its '\n'.
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  all += "{\"v\":1,\"type\":\"st";
  for (size_t chunk : {1u, 7u, 64u, 100000u}) {
    LineSplitter split;
    std::vector<std::string> got;
    for (size_t at = 0; at < all.size(); at += chunk)
      for (auto& l : split.feed(std::string_view(all).substr(at, chunk))) got.push_back(std::move(l));
    CHECK(got == lines);
    CHECK(split.pending_bytes() == 17);
    const std::vector<std::string> rest = split.feed("ep\",\"step\":13}\n");
    CHECK(rest.size() == 1 && rest[0] == "{\"v\":1,\"type\":\"step\",\"step\":13}");
    CHECK(split.pending_bytes() == 0);
  }
  LineSplitter torn;
  torn.feed("{\"v\":1");
  CHECK(torn.drop_pending() == 6 && torn.pending_bytes() == 0);
  return flotilla_test::summary("test_metrics_reader");
}
