// The worker's `comm` record, end to end (issue 36; docs/metrics-protocol.md "comm"), over real Gloo
// ranks of the real worker:
// - `flotilla run` of a dp=2 run (ZeRO-0): metrics.jsonl has one comm record after each step record;
//   the dp group's all-reduce moves exactly the gradient (parameters x 4 bytes, in n_layer + 1
//   buckets) plus the 8-byte loss mean per step; the store keeps the comm/ names at the record's step;
//   runs/comm_efficiency's report gives the dp group a bus bandwidth and a hidden share; `flotilla run`
//   and `flotilla runs show` print the table and the advice (and --json has both); `flotilla compare` has the
//   two communication rows; the Live feed (runs/store_feed.h) gives comm records back whole and keeps comm/
//   names out of its step records;
// - tp=2, dp=2 with ZeRO-1 and pp=2 runs (flotilla-worker launch) name their groups and operations:
//   tp all-reduces, dp reduce-scatter of the padded gradient and all-gather of the padded parameters
//   (nccl-tests' sizes: the input and the output, n chunks each), pipeline send/recv.
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/comm_efficiency.h"
#include "runs/store_feed.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
using nlohmann::json;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(
      argv,
      {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="},
      log));
  r.output = read_file(log);
  return r;
}

// 2 layers, 4 sequences of 16 tokens per step (micro_batch 2): dp=2 gives each replica one
// micro-batch, pp=2 pipelines two.
std::string config_text(const std::string& name, const std::string& parallel, int steps = 6) {
  return "[run]\nname = \"" + name +
         "\"\nseed = 3\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
         "vocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = " +
         std::to_string(steps) +
         "\nmicro_batch = 2\nseq_len = 16\nglobal_batch_tokens = 64\nlog_every = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel + "\n[checkpoint]\nevery = 1000000\nsave_final = false\n[eval]\nevery = 0\n";
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::vector<json> of_type(const std::vector<json>& records, const char* type) {
  std::vector<json> out;
  for (const json& r : records)
    if (r.value("type", "") == type) out.push_back(r);
  return out;
}

int64_t parameters_of(const std::vector<json>& records) {
  for (const json& r : records)
    if (r.value("type", "") == "run_start") return r.value("parameters", int64_t{0});
  return 0;
}

// The op `op` of group `group` in a comm record (null when absent).
json op_of(const json& comm, const char* group, const char* op) {
  if (!comm.contains("groups") || !comm["groups"].contains(group)) return nullptr;
  const json& ops = comm["groups"][group]["ops"];
  return ops.contains(op) ? ops[op] : json(nullptr);
}

// `flotilla-worker launch` of `ranks` processes on one machine; its run dir.
std::string launch(const std::string& name, int ranks, const std::string& parallel) {
  const std::string cfg = g_root + "/" + name + ".toml", out = g_root + "/" + name;
  write_text(cfg, config_text(name, parallel, 4));
  const ProcResult r = run_worker({"launch", "--nproc-per-node", std::to_string(ranks), "--master-port", "0",
                                   "--no-bind", "--", "train", "--config", cfg, "--out-dir", out},
                                  {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"});
  CHECK_MSG(r.exit_code == 0, "%s: %s", name.c_str(), r.output.c_str());
  return out;
}

void dp_run_through_the_cli() {
  const std::string cfg = g_root + "/dp2.toml";
  write_text(cfg, config_text("dp2", "dp = 2\nzero = 0"));
  const ProcResult run = cli({"run", cfg});
  CHECK_MSG(run.exit_code == 0, "%s", run.output.c_str());
  // `flotilla run` ends a multi-rank run with the table.
  CHECK_MSG(has(run.output, "communication at step 6") && has(run.output, "all_reduce"), "%s",
            run.output.c_str());

  const db::Database d(g_root + "/store.db");
  const db::Run r = db::get_run(d, "dp2");
  const std::vector<json> records = read_metrics(r.run_dir);
  const auto steps = of_type(records, "step"), comms = of_type(records, "comm");
  CHECK(steps.size() == 3);
  CHECK_MSG(comms.size() == steps.size(), "%zu comm records for %zu step records", comms.size(),
            steps.size());
  const int64_t params = parameters_of(records);
  CHECK(params > 0);
  for (const json& c : comms) {
    CHECK(c.value("rank", -1) == 0);
    CHECK(c.value("steps", 0) == 2);  // log_every = 2
    CHECK(c.value("step_ms", 0.0) > 0);
    CHECK(c["groups"].size() == 1);  // tp and pp have one rank: left out
    CHECK(c["groups"]["dp"].value("size", 0) == 2);
    const json ar = op_of(c, "dp", "all_reduce");
    CHECK(ar.is_object());
    if (!ar.is_object()) continue;
    // Every gradient once (parameters x 4 bytes) in n_layer + 1 buckets, and the loss mean (a double).
    CHECK_MSG(ar.value("bytes", 0.0) == 4.0 * static_cast<double>(params) + 8.0,
              "bytes %.0f, parameters %lld", ar.value("bytes", 0.0), static_cast<long long>(params));
    CHECK_NEAR(ar.value("count", 0.0), 2 + 1 + 1, 1e-9);
    CHECK(ar.value("ms", 0.0) > 0);
    CHECK(ar.value("wait_ms", -1.0) >= 0);
    CHECK(op_of(c, "dp", "reduce_scatter").is_null());  // ZeRO-0
  }
  if (!comms.empty()) CHECK(comms.back().value("step", 0) == 6);

  // The store: the comm/ names at each record's step.
  const auto names = db::metric_names(d, r.id);
  const std::set<std::string> have(names.begin(), names.end());
  for (const char* n : {"comm/step_ms", "comm/steps", "comm/dp/size", "comm/dp/all_reduce/count",
                        "comm/dp/all_reduce/bytes", "comm/dp/all_reduce/ms", "comm/dp/all_reduce/wait_ms"})
    CHECK_MSG(have.count(n) == 1, "no metric %s", n);
  const auto bytes = db::metric_points(d, r.id, "comm/dp/all_reduce/bytes");
  CHECK(bytes.size() == 3);
  if (!bytes.empty()) {
    CHECK(bytes.back().step == 6);
    CHECK_NEAR(bytes.back().value, 4.0 * static_cast<double>(params) + 8.0, 1e-6);
  }

  // The report (the one place efficiency is computed): a bus bandwidth, a hidden share, no link
  // (a local run has no measured link).
  const runs::CommReport rep = runs::comm_report(d, r.id);
  CHECK(rep.step == 6);
  CHECK(rep.groups.size() == 1);
  if (!rep.groups.empty()) {
    const runs::GroupEfficiency& g = rep.groups.front();
    CHECK(g.group == "dp");
    CHECK(g.size == 2);
    CHECK(g.busbw && *g.busbw > 0);
    CHECK(g.hidden && *g.hidden >= 0 && *g.hidden <= 1);
    CHECK(!g.share);
    if (g.busbw && !g.ops.empty())  // nccl-tests' all-reduce factor 2(n-1)/n = 1 for n = 2
      CHECK_NEAR(*g.busbw, g.ops.front().bytes / (g.ops.front().ms / 1000.0), *g.busbw * 1e-9);
  }

  // runs show: the table, and the names summed up rather than listed.
  const ProcResult show = cli({"runs", "show", "dp2"});
  CHECK(show.exit_code == 0);
  CHECK_MSG(has(show.output, "communication at step 6") && has(show.output, "dp     all_reduce"), "%s",
            show.output.c_str());
  CHECK_MSG(has(show.output, "comm/... (") && !has(show.output, "comm/dp/all_reduce/bytes"), "%s",
            show.output.c_str());
  const ProcResult js = cli({"runs", "show", "dp2", "--json"});
  const json j = json::parse(js.output, nullptr, false);
  CHECK_MSG(j.is_object() && j.contains("communication"), "%s", js.output.c_str());
  if (j.is_object() && j.contains("communication")) {
    CHECK(j["communication"]["step"] == 6);
    CHECK(j["communication"]["groups"].size() == 1);
    CHECK(j["communication"]["groups"][0]["group"] == "dp");
    CHECK(j["communication"]["groups"][0]["busbw"].is_number());
    CHECK(j["communication"]["groups"][0]["share"].is_null());
    // The advice (runs/comm_advice.h) beside the table: a list in JSON, the same texts in the text.
    CHECK(j["communication"]["advice"].is_array());
    for (const json& a : j["communication"]["advice"]) {
      CHECK(a["rule"].is_string() && a["text"].is_string());
      CHECK_MSG(has(show.output, "advice:") && has(show.output, a["text"].get<std::string>()), "%s",
                show.output.c_str());
    }
  }

  // compare: the dp group's link share (none: no link measured) and the hidden share.
  const std::string one = g_root + "/one.toml";
  write_text(one, config_text("one", "dp = 1", 2));
  CHECK(cli({"run", one}).exit_code == 0);
  const ProcResult cmp = cli({"compare", "dp2", "one", "--json"});
  const json c = json::parse(cmp.output, nullptr, false);
  CHECK_MSG(c.is_object() && c["runs"].size() == 2, "%s", cmp.output.c_str());
  if (c.is_object() && c["runs"].size() == 2) {
    CHECK(c["runs"][0].contains("comm_dp_link_share") && c["runs"][0]["comm_dp_link_share"].is_null());
    CHECK(c["runs"][0]["comm_hidden"].is_number());
    CHECK(c["runs"][1]["comm_hidden"].is_null());  // one rank: no communication
  }
  CHECK(has(cli({"compare", "dp2", "one"}).output, "comm_hidden"));

  // The Live feed: comm records whole, none of their names in the step records.
  runs::StoreFeedReader feed(r.id);
  int comm_records = 0;
  for (const flotilla::MetricsRecord& rec : feed.read(d).records) {
    if (rec.type == flotilla::MetricsRecordType::kStep)
      for (const auto& [name, v] : rec.numbers)
        CHECK_MSG(name.rfind("comm/", 0) != 0, "step has %s", name.c_str());
    if (rec.type != flotilla::MetricsRecordType::kComm) continue;
    ++comm_records;
    const flotilla::CommRecord& cr = rec.comm();
    CHECK(cr.step_ms > 0 && cr.steps == 2);
    CHECK(cr.groups.size() == 1 && cr.groups[0].group == "dp" && cr.groups[0].size == 2);
    if (cr.groups.size() == 1 && !cr.groups[0].ops.empty()) {
      CHECK(cr.groups[0].ops[0].op == "all_reduce");
      CHECK_NEAR(cr.groups[0].ops[0].bytes, 4.0 * static_cast<double>(params) + 8.0, 1e-6);
    }
  }
  CHECK(comm_records == 3);
  CHECK(feed.read(d).records.empty());
}

void layouts_through_the_worker() {
  // Tensor parallel: the f/g all-reduces of every block, on the tp group.
  {
    const auto records = read_metrics(launch("tp2", 2, "tp = 2"));
    const auto comms = of_type(records, "comm");
    CHECK(comms.size() == 2);
    if (!comms.empty()) {
      const json& c = comms.back();
      CHECK(c["groups"].contains("tp") && !c["groups"].contains("dp"));
      const json ar = op_of(c, "tp", "all_reduce");
      CHECK(ar.is_object() && ar.value("count", 0.0) >= 4 && ar.value("bytes", 0.0) > 0);
    }
  }
  // ZeRO-1: the padded gradient reduce-scattered (its input: n chunks) and the padded parameters
  // all-gathered (its output: n chunks), the same bytes; the norm's partial sum all-reduced.
  {
    const auto records = read_metrics(launch("zero1", 2, "dp = 2\nzero = 1"));
    const auto comms = of_type(records, "comm");
    const int64_t params = parameters_of(records);
    CHECK(comms.size() == 2);
    if (!comms.empty()) {
      const json& c = comms.back();
      const json rs = op_of(c, "dp", "reduce_scatter"), ag = op_of(c, "dp", "all_gather");
      CHECK(rs.is_object() && ag.is_object());
      if (rs.is_object() && ag.is_object()) {
        CHECK_NEAR(rs.value("count", 0.0), 1, 1e-9);
        CHECK_NEAR(ag.value("count", 0.0), 1, 1e-9);
        const double padded = 4.0 * static_cast<double>((params + 1) / 2 * 2);  // 2 equal shards
        CHECK_MSG(rs.value("bytes", 0.0) == padded, "reduce_scatter %.0f bytes, %lld parameters",
                  rs.value("bytes", 0.0), static_cast<long long>(params));
        CHECK(ag.value("bytes", 0.0) == rs.value("bytes", 0.0));
      }
      const json ar = op_of(c, "dp", "all_reduce");  // the loss mean and the norm's sum of squares
      CHECK(ar.is_object() && ar.value("bytes", 0.0) == 16.0);
    }
  }
  // Pipeline: activations forward and gradients back between the stages.
  {
    const auto records = read_metrics(launch("pp2", 2, "pp = 2\nmicro_batches = 2"));
    const auto comms = of_type(records, "comm");
    CHECK(comms.size() == 2);
    if (!comms.empty()) {
      const json& c = comms.back();
      CHECK(c["groups"].contains("pp"));
      const json sr = op_of(c, "pp", "send_recv");
      CHECK_MSG(sr.is_object() && sr.value("count", 0.0) >= 2 && sr.value("bytes", 0.0) > 0, "%s",
                c.dump().c_str());
      // A micro-batch's activations: micro_batch x seq_len x n_embd floats, each way, 2 micro-batches.
      if (sr.is_object()) CHECK(sr.value("bytes", 0.0) >= 2.0 * 2 * 2 * 16 * 32 * 4);
    }
  }
}

}  // namespace

int main() {
  g_root = fresh_dir("comm_record_cli");
  dp_run_through_the_cli();
  layouts_through_the_worker();
  return summary("test_comm_record_cli");
}
