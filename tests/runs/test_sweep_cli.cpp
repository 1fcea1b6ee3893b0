// Sweeps (runs/sweep.h, `flotilla sweep`), in process and through the real flotilla binary on a
// real SQLite store:
// - a grid is the cartesian product (counts, order, values in each entry's config, names
//   <sweep>-<i>, one group, the sweep row with its axes);
// - random points: counts, every value inside its range, integer keys rounded, log ranges spread
//   log-uniformly, choices only from the list, the same seed gives the same points;
// - an unknown key is refused with the config reader's did-you-mean, a bad point is named with its
//   values, a taken run name refuses the whole sweep: nothing is queued in any of these;
// - halving: eval.every 0 is set (and said), a too coarse one refused with the figures;
// - `sweep list` / `show`, and `compare --group` opens the sweep's started runs.
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/sweep.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, {"DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  r.output = read_file(log);
  return r;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string config(const std::string& name, const std::string& extra = "") {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(path,
             "[run]\nname = \"" + name +
                 "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
                 "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = "
                 "30000\n[train]\nsteps = 64\nmicro_batch = 2\nseq_len = 16\n" +
                 extra);
  return path;
}

size_t entries(const std::string& group) {
  const db::Database d(g_root + "/store.db");
  return db::list_queue_group(d, group).size();
}

size_t all_entries() {
  const db::Database d(g_root + "/store.db");
  return db::list_queue(d, true).size();
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void grid_expansion() {
  runs::SweepSpec spec;
  spec.axes = {runs::parse_sweep_axis("optim.lr=1e-4,3e-4,1e-3"), runs::parse_sweep_axis("lora.rank=8|16")};
  const auto points = runs::expand_sweep(spec);
  CHECK(points.size() == 6);
  CHECK(points.size() == 6 && points[0].words() == "optim.lr=1e-4 lora.rank=8" &&
        points[1].words() == "optim.lr=1e-4 lora.rank=16" &&
        points[5].words() == "optim.lr=1e-3 lora.rank=16");
  // A quoted value keeps its commas; one value applies to every point.
  spec.axes = {runs::parse_sweep_axis("lora.targets=\"q_proj,v_proj\",all-linear"),
               runs::parse_sweep_axis("train.steps=10")};
  const auto q = runs::expand_sweep(spec);
  CHECK(q.size() == 2 && q[0].values[0].second == "\"q_proj,v_proj\"" && q[1].values[1].second == "10");
  // A range is for --random only; an unknown key has the reader's did-you-mean; a wrong type is named.
  spec.axes = {runs::parse_sweep_axis("optim.lr=1e-4:1e-2")};
  CHECK(has(refusal([&] { runs::expand_sweep(spec); }), "ranges need --random N"));
  CHECK(has(refusal([] { runs::parse_sweep_axis("optim.l=1e-4,3e-4"); }), "did you mean 'optim.lr'"));
  CHECK(has(refusal([] { runs::parse_sweep_axis("train.steps=10,many"); }), "train.steps"));
  CHECK(has(refusal([] { runs::parse_sweep_axis("optim.lr=1e-2:1e-4"); }), "low end must be below"));
  CHECK(has(refusal([] { runs::parse_sweep_axis("optim.lr=0:1e-4:log"); }), "above 0"));
  CHECK(has(refusal([] { runs::parse_sweep_axis("run.out_dir=a,b"); }), "cannot be swept"));
}

void random_expansion() {
  runs::SweepSpec spec;
  spec.axes = {runs::parse_sweep_axis("optim.lr=1e-5:1e-1:log"), runs::parse_sweep_axis("lora.rank=4:64"),
               runs::parse_sweep_axis("optim.schedule=cosine|constant|wsd"),
               runs::parse_sweep_axis("optim.beta2=0.9:0.99")};
  spec.random = 400;
  spec.seed = 42;
  const auto points = runs::expand_sweep(spec);
  CHECK(points.size() == 400);
  int below_1e3 = 0, ints_ok = 0, in_range = 0, lin_low_half = 0;
  std::set<std::string> schedules;
  for (const auto& p : points) {
    const double lr = std::stod(p.values[0].second);
    const std::string& rank = p.values[1].second;
    const double beta2 = std::stod(p.values[3].second);
    in_range += lr >= 1e-5 && lr <= 1e-1 && beta2 >= 0.9 && beta2 <= 0.99;
    below_1e3 += lr < 1e-3;  // log-uniform: half of the four decades lie below 1e-3
    ints_ok += rank.find_first_not_of("0123456789") == std::string::npos && std::stoi(rank) >= 4 &&
               std::stoi(rank) <= 64;
    lin_low_half += beta2 < 0.945;
    schedules.insert(p.values[2].second);
  }
  CHECK(in_range == 400 && ints_ok == 400);
  CHECK_MSG(below_1e3 > 160 && below_1e3 < 240, "%d of 400 below 1e-3 (log-uniform: about 200)", below_1e3);
  CHECK_MSG(lin_low_half > 160 && lin_low_half < 240, "%d of 400 in the low half", lin_low_half);
  CHECK(schedules == (std::set<std::string>{"constant", "cosine", "wsd"}));
  // The same seed, the same points; another seed, others.
  const auto again = runs::expand_sweep(spec);
  bool same = true;
  for (size_t i = 0; i < points.size(); ++i) same = same && points[i].words() == again[i].words();
  CHECK(same);
  spec.seed = 43;
  CHECK(runs::expand_sweep(spec)[0].words() != points[0].words());
  // Each sampled float reads back as a float with the text shown.
  CHECK(runs::sweep_number_text(3.0) == "3.0" && runs::sweep_number_text(0.000316227) == "0.0003162");
}

void cli_grid_queues_one_group() {
  const std::string cfg = config("grid");
  const ProcResult r =
      cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4,1e-3", "--set", "lora.rank=8,16", "--name", "lr",
           "--on", "local", "--on", "node:b", "--priority", "3", "--max-usd", "0.5"});
  CHECK_MSG(r.exit_code == 0, "exit %d\n%s", r.exit_code, r.output.c_str());
  CHECK(has(r.output, "sweep lr: 6 points") && has(r.output, "lr-6") &&
        has(r.output, "optim.lr=1e-3 lora.rank=16"));
  const db::Database d(g_root + "/store.db");
  const auto es = db::list_queue_group(d, "lr");
  CHECK(es.size() == 6);
  if (es.size() == 6) {
    for (size_t i = 0; i < 6; ++i) {
      CHECK(es[i].name == "lr-" + std::to_string(i + 1));
      CHECK(es[i].places == (std::vector<std::string>{"local", "node:b"}) && es[i].priority == 3);
      CHECK(es[i].max_usd && *es[i].max_usd == 0.5 && es[i].state == db::EntryState::kQueued);
    }
    // Each entry carries its point's whole config.
    const flotilla::RunConfig c = flotilla::parse_config_toml(es[3].config_toml, "entry");
    CHECK(c.run.name == "lr-4" && std::fabs(c.optim.lr - 3e-4) < 1e-12 && c.lora.rank == 16 &&
          c.train.steps == 64);
  }
  const auto sweep = db::find_sweep(d, "lr");
  CHECK(sweep && has(sweep->spec_json, "optim.lr") && sweep->halving_json == "{}");
  CHECK(sweep && runs::sweep_points_of(sweep->spec_json).size() == 6);

  const ProcResult show = cli({"sweep", "show", "lr"});
  CHECK_MSG(show.exit_code == 0 && has(show.output, "lr-5") &&
                has(show.output, "optim.lr=1e-3 lora.rank=8") && has(show.output, "queued") &&
                has(show.output, "successive halving: off"),
            "%s", show.output.c_str());
  const ProcResult list = cli({"sweep", "list", "--json"});
  const auto lj = nlohmann::json::parse(list.output, nullptr, false);
  CHECK(lj.is_array() && lj.size() == 1 && lj[0]["name"] == "lr" && lj[0]["points"] == 6);
  // The default name is the config's run.name; random points print their seed.
  const ProcResult rnd =
      cli({"sweep", cfg, "--set", "optim.lr=1e-4:1e-2:log", "--random", "3", "--seed", "9"});
  CHECK_MSG(rnd.exit_code == 0 && has(rnd.output, "sweep grid: 3 points") && has(rnd.output, "seed 9"), "%s",
            rnd.output.c_str());
  CHECK(entries("grid") == 3);
}

void cli_refusals_queue_nothing() {
  const std::string cfg = config("bad");
  const size_t before = all_entries();
  // An unknown key: the reader's did-you-mean.
  ProcResult r = cli({"sweep", cfg, "--set", "optim.l=1e-4,3e-4", "--name", "b1"});
  CHECK_MSG(
      r.exit_code == 3 && has(r.output, "did you mean 'optim.lr'") && has(r.output, "nothing was queued"),
      "exit %d\n%s", r.exit_code, r.output.c_str());
  // A bad point (n_embd 32 is not a multiple of 3 heads): the first one named with its values.
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4", "--set", "model.n_head=2,3,5", "--name", "b2"});
  CHECK_MSG(r.exit_code == 3 && has(r.output, "point 2 of 6 (optim.lr=1e-4 model.n_head=3)") &&
                has(r.output, "model.n_head") && has(r.output, "nothing was queued"),
            "exit %d\n%s", r.exit_code, r.output.c_str());
  // A taken run name refuses the whole sweep: the sweep row and the entries before it roll back.
  {
    db::Database d(g_root + "/store.db");
    db::NewRun run;
    run.name = "b3-2";
    db::create_run(d, run);
  }
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4,1e-3", "--name", "b3"});
  CHECK_MSG(r.exit_code == 9 && has(r.output, "b3-2") && has(r.output, "nothing was queued"), "exit %d\n%s",
            r.exit_code, r.output.c_str());
  // A taken sweep name.
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4", "--name", "lr"});
  CHECK_MSG(r.exit_code == 9 && has(r.output, "a sweep named 'lr' exists"), "exit %d\n%s", r.exit_code,
            r.output.c_str());
  // A range without --random, a bad place.
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4:1e-2", "--name", "b4"});
  CHECK(r.exit_code == 3 && has(r.output, "ranges need --random N"));
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,1e-2", "--on", "moon", "--name", "b5"});
  CHECK_MSG(r.exit_code == 2 && has(r.output, "--on: ") && has(r.output, "moon"), "exit %d\n%s", r.exit_code,
            r.output.c_str());
  const db::Database d(g_root + "/store.db");
  CHECK_MSG(all_entries() == before, "%zu entries, %zu before", all_entries(), before);
  CHECK(!db::find_sweep(d, "b1") && !db::find_sweep(d, "b2") && !db::find_sweep(d, "b3"));
}

void cli_halving_checks_eval() {
  // eval.every 0: set to the rungs' steps (64 steps x 32 tokens = 2048; auto rungs 256, 512, 1024
  // tokens = steps 8, 16, 32), and said.
  const std::string cfg = config("halve");
  ProcResult r =
      cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4,1e-3,3e-3", "--halving", "auto", "--name", "h1"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "eval.every was 0") && has(r.output, "set to 8 steps") &&
                has(r.output, "keeps the best 1/2 at 256 tokens, 512 tokens, 1.02k tokens"),
            "exit %d\n%s", r.exit_code, r.output.c_str());
  {
    const db::Database d(g_root + "/store.db");
    const auto es = db::list_queue_group(d, "h1");
    CHECK(es.size() == 4 && flotilla::parse_config_toml(es[0].config_toml, "e").eval.every == 8);
    const auto s = db::find_sweep(d, "h1");
    CHECK(s && runs::parse_halving_json(s->halving_json).rungs == (std::vector<int64_t>{256, 512, 1024}));
  }
  // Given rungs with --eta 3, token suffixes.
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4,1e-3", "--halving", "0.5k,1k", "--eta", "3", "--name",
           "h2"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "keeps the best 1/3 at 500 tokens, 1k tokens"), "%s",
            r.output.c_str());
  // eval.every 40 steps (1280 tokens) cannot give the 256-token rung its own loss: refused, figures shown.
  const std::string coarse = config("coarse", "[eval]\nevery = 40\n");
  r = cli({"sweep", coarse, "--set", "optim.lr=1e-4,3e-4", "--halving", "256,512", "--name", "h3"});
  CHECK_MSG(r.exit_code == 3 && has(r.output, "would share one validation loss") &&
                has(r.output, "eval.every 40") && has(r.output, "nothing was queued"),
            "exit %d\n%s", r.exit_code, r.output.c_str());
  // A rung past the runs' end.
  r = cli({"sweep", cfg, "--set", "optim.lr=1e-4,3e-4", "--halving", "4096", "--name", "h4"});
  CHECK(r.exit_code == 3 && has(r.output, "not before the end of the shortest run"));
  CHECK(entries("h3") == 0 && entries("h4") == 0);
}

void compare_opens_the_group() {
  ProcResult r = cli({"compare", "--group", "lr"});
  CHECK_MSG(r.exit_code == 4 && has(r.output, "no started run yet (6 queued)"), "exit %d\n%s", r.exit_code,
            r.output.c_str());
  r = cli({"compare", "--group", "nosuch"});
  CHECK(r.exit_code == 4 && has(r.output, "no sweep named 'nosuch'"));
  {
    // What the scheduler does when it starts entries: a run per entry, written back.
    db::Database d(g_root + "/store.db");
    const auto es = db::list_queue_group(d, "lr");
    for (size_t i = 0; i < 3 && i < es.size(); ++i) {
      db::NewRun run;
      run.name = es[i].name;
      run.config_toml = es[i].config_toml;
      run.config_json = flotilla::config_to_json(flotilla::parse_config_toml(es[i].config_toml, "e"));
      const int64_t id = db::create_run(d, run);
      CHECK(db::claim_queue_entry(d, es[i].id, "t", "local", "", "{}", 10));
      CHECK(db::set_queue_entry_run(d, es[i].id, "t", id, 11));
    }
  }
  r = cli({"compare", "--group", "lr", "--json"});
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  CHECK_MSG(r.exit_code == 0 && j.is_object() && j["runs"].size() == 3 && j["runs"][0]["name"] == "lr-1" &&
                j["runs"][2]["name"] == "lr-3",
            "exit %d\n%s", r.exit_code, r.output.c_str());
  bool lr_differs = false, rank_differs = false;
  for (const auto& diff : j["config_differences"]) {
    lr_differs |= diff["key"] == "optim.lr";
    rank_differs |= diff["key"] == "lora.rank";
  }
  CHECK(lr_differs && rank_differs);
  r = cli({"sweep", "compare", "lr"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "lr-1") && has(r.output, "config differences"), "%s",
            r.output.c_str());
  r = cli({"sweep", "show", "lr", "--json"});
  const auto s = nlohmann::json::parse(r.output, nullptr, false);
  CHECK(s.is_object() && s["points"].size() == 6 && s["points"][0]["run"] == "lr-1" &&
        s["points"][5]["run"].is_null());
}

}  // namespace

int main() {
  g_root = fresh_dir("runs_sweep_cli");
  grid_expansion();
  random_expansion();
  cli_grid_queues_one_group();
  cli_refusals_queue_nothing();
  cli_halving_checks_eval();
  compare_opens_the_group();
  return summary("test_sweep_cli");
}
