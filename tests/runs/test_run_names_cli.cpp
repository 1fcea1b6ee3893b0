// Run names, option values and run folders at creation (issue 33, the second audit's D1, D17, D4),
// through the real flotilla and flotilla-worker binaries and real SQLite files:
// - D1: a name that is not 1-64 of [A-Za-z0-9._-] starting with a letter or digit ("../../victim",
//   "a/b", a newline, a space, "..", ".hidden", a leading '-', 65 characters) is refused before any
//   row, folder or process exists; a victim folder outside runs/ keeps its files byte for byte;
//   the runs layer (create_local_run, place_unstored_run: the app's and forks' path) refuses the
//   same names; runs stored under the older rule stay addressable by show and delete;
// - D17: an option's value that looks like an option ("--name --budget", "--name -rf --quiet",
//   "--db --quiet") is a usage error, not a value; a negative number reaches the option's check;
// - D4: another run's folder spelled with a trailing '/', "//", "./", relative, or through a
//   symlink is refused as "belongs to run ..."; so is a folder an older row stored in another
//   spelling; a new run's folder is stored canonical.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "check.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "runs/run_setup.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace fs = std::filesystem;

namespace {

std::string g_root;
int g_calls = 0;

std::vector<std::string> env() {
  return {"OMP_NUM_THREADS=1", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="};
}

// `flotilla [--db DB] args...` run in `cwd` (default g_root); waits and returns its output.
ProcResult cli_in(const std::string& cwd, const std::vector<std::string>& args, bool with_db = true) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd, FLOTILLA_CLI_PATH};
  if (with_db) {
    argv.push_back("--db");
    argv.push_back(g_root + "/store.db");
  }
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, env(), log));
  r.output = read_file(log);
  return r;
}

ProcResult cli(const std::vector<std::string>& args) { return cli_in(g_root, args); }

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

int64_t run_count() {
  if (!fs::exists(g_root + "/store.db")) return 0;
  const db::Database d(g_root + "/store.db");
  return static_cast<int64_t>(db::list_runs(d).size());
}

// Every entry under `dir`, recursively, with its bytes: a folder's exact state.
std::string tree(const std::string& dir) {
  std::string out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "(none)";
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    out += e.path().string() + (e.is_regular_file() ? "=" + read_file(e.path().string()) : "/") + "\n";
  return out;
}

std::string config(const std::string& name, const std::string& extra = "") {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(path, "[run]\nname = \"" + name +
                       "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
                       "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\n"
                       "synthetic_tokens = 30000\n[train]\nsteps = 3\nmicro_batch = 2\nseq_len = 16\n" +
                       extra);
  return path;
}

void bad_names_create_nothing() {
  // A folder outside runs/ with files in it: `--name ../../victim` would have written into it.
  const std::string work = g_root + "/deep/work";
  fs::create_directories(work);
  fs::create_directories(g_root + "/deep/victim");
  write_text(g_root + "/deep/victim/run.toml", "precious\n");
  write_text(g_root + "/deep/victim/worker.pid", "123 456\n");
  write_text(g_root + "/deep/victim/worker.log", "old log\n");
  const std::string before = tree(g_root + "/deep/victim");
  const std::string cfg = config("named");
  const std::string long_name(65, 'a');
  for (const std::string& name : {std::string("../../victim"), std::string("a/b"), std::string("x\ny"),
                                  std::string("ok name"), std::string(".."), std::string("."),
                                  std::string(".hidden"), std::string("_under"), long_name, std::string()}) {
    const ProcResult r = cli_in(work, {"run", cfg, "--name=" + name, "--quiet"});
    CHECK_MSG(r.exit_code == 2, "--name '%s': exit %d\n%s", name.c_str(), r.exit_code, r.output.c_str());
    CHECK_MSG(has(r.output, "is refused") && has(r.output, "1 to 64 characters from letters, digits"),
              "--name '%s': %s", name.c_str(), r.output.c_str());
  }
  // The newline is shown escaped, so the message stays one line.
  const ProcResult nl = cli_in(work, {"run", cfg, "--name", "x\ny", "--quiet"});
  CHECK_MSG(has(nl.output, "'x\\ny'") && has(nl.output, "a control character at position 2"), "%s",
            nl.output.c_str());
  CHECK(run_count() == 0);
  CHECK_MSG(!fs::exists(work + "/runs") && !fs::exists(g_root + "/deep/runs"), "a run folder was made");
  CHECK_MSG(tree(g_root + "/deep/victim") == before, "the victim folder changed:\n%s",
            tree(g_root + "/deep/victim").c_str());
  // run.name from the config follows the same rule (a config error, exit 3).
  const ProcResult from_config = cli_in(work, {"run", config("lead", "")}, true);
  CHECK(from_config.exit_code == 0);  // a valid config name still runs
  const ProcResult bad_config = cli_in(work, {"run", cfg, "--set", "run.name=-lead", "--quiet"});
  CHECK_MSG(
      bad_config.exit_code == 3 && has(bad_config.output, "run name '-lead' is refused: it starts with '-'"),
      "exit %d\n%s", bad_config.exit_code, bad_config.output.c_str());
  CHECK(run_count() == 1);
}

// The runs layer itself, as the app's wizard, demo and forks call it (no CLI in between).
void the_runs_layer_refuses_the_same_names() {
  const int64_t before = run_count();
  db::Writer writer(g_root + "/store.db");
  flotilla::runs::NewRunRequest req;
  req.config = flotilla::load_config(config("layer"), {});
  req.runs_root = g_root + "/layer-runs";
  for (const std::string& name : {std::string("../escape"), std::string("-rf"), std::string("a b")}) {
    req.name = name;
    CHECK_THROWS(flotilla::runs::create_local_run(writer, req), "is refused");
    CHECK_THROWS(flotilla::runs::place_unstored_run(g_root + "/layer-runs", name), "is refused");
  }
  req.name.clear();
  req.config.run.name = "-from-config";  // the wizard's name field
  CHECK_THROWS(flotilla::runs::create_local_run(writer, req), "starts with '-'");
  CHECK(!fs::exists(g_root + "/layer-runs") && !fs::exists(g_root + "/escape"));
  CHECK(run_count() == before);
  // A 64-character name whose NAME-2 would be 66 is refused, not stored past the limit.
  req.config.run.name = std::string(64, 'b');
  req.config.run.out_dir.clear();
  const flotilla::runs::NewRun first = flotilla::runs::create_local_run(writer, req);
  CHECK(first.name == std::string(64, 'b'));
  CHECK_THROWS(flotilla::runs::create_local_run(writer, req), "66 characters");
  CHECK(run_count() == before + 1);
  writer.run([&](db::Database& d) { db::delete_run(d, first.run_id); });
}

// Runs stored before the rule (the audit's "--quiet", a name with a space) stay addressable.
void old_names_stay_addressable() {
  int64_t dash = 0, spaced = 0;
  {
    db::Database d(g_root + "/store.db");
    db::NewRun row;
    row.name = "--quiet";
    dash = db::create_run(d, row);
    row.name = "old name";
    spaced = db::create_run(d, row);
  }
  ProcResult r = cli({"runs", "show", "--", "--quiet"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "--quiet"), "exit %d\n%s", r.exit_code, r.output.c_str());
  r = cli({"runs", "show", std::to_string(dash)});
  CHECK_MSG(r.exit_code == 0, "exit %d\n%s", r.exit_code, r.output.c_str());
  r = cli({"runs", "show", "old name"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "old name"), "exit %d\n%s", r.exit_code, r.output.c_str());
  CHECK(cli({"runs", "delete", "--", "--quiet"}).exit_code == 0);
  CHECK(cli({"runs", "delete", "old name"}).exit_code == 0);
  const db::Database d(g_root + "/store.db");
  CHECK(!db::find_run(d, "--quiet") && !db::find_run(d, "old name"));
  (void)spaced;
}

void option_like_values_are_usage_errors() {
  const int64_t before = run_count();
  const std::string cfg = config("opts");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"run", cfg, "--name", "--budget", "5"},
       "--name needs a value, but is followed by the option '--budget'"},
      {{"run", cfg, "--name", "-rf", "--quiet"}, "--name needs a value, but is followed by the option '-rf'"},
      {{"run", cfg, "--name", "--quiet"}, "--name needs a value"},
      {{"run", cfg, "--quiet", "--set", "--quiet"}, "--set needs a value"},
      {{"run", cfg, "--budget", "-1"}, "--budget needs a positive number"},
      {{"run", cfg, "--max-restarts", "-2"}, "--max-restarts needs a whole number"},
      {{"runs", "show", "-rf"}, "unknown option '-rf'"},
  };
  for (const Case& c : cases) {
    const ProcResult r = cli(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    CHECK_MSG(r.exit_code == 2 && has(r.output, c.says), "%s: exit %d\n%s", joined.c_str(), r.exit_code,
              r.output.c_str());
  }
  // The global --db takes no option either (it would have made a store named "--quiet").
  const ProcResult db_opt = cli_in(g_root, {"--db", "--quiet", "runs", "list"}, false);
  CHECK_MSG(db_opt.exit_code == 2 && has(db_opt.output, "--db needs a file"), "%s", db_opt.output.c_str());
  CHECK(!fs::exists(g_root + "/--quiet"));
  CHECK(run_count() == before);
  CHECK(!fs::exists(g_root + "/runs/--budget") && !fs::exists(g_root + "/runs/--quiet"));
}

void one_folder_belongs_to_one_run() {
  const std::string shared = g_root + "/shared";
  const std::string cfg = config("con", "[checkpoint]\nevery = 1000\n");
  ProcResult r = cli({"run", cfg, "--quiet", "--set", "run.out_dir=" + shared});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  fs::create_directory_symlink(shared, g_root + "/link");
  const int64_t before = run_count();
  const std::string other = config("other");
  for (const std::string& dir :
       {shared + "/", g_root + "//shared", g_root + "/./shared", g_root + "/link", g_root + "/link/",
        std::string("shared/"), std::string("./link"), g_root + "/deep/../shared"}) {
    r = cli({"run", other, "--quiet", "--set", "run.out_dir=" + dir});
    CHECK_MSG(r.exit_code == 9 && has(r.output, "belongs to run 'con'"), "out_dir %s: exit %d\n%s",
              dir.c_str(), r.exit_code, r.output.c_str());
  }
  CHECK(run_count() == before);
  // Nor may run folders nest: inside another run's folder (through the symlink too), or holding it.
  for (const auto& [dir, want] :
       {std::pair<std::string, std::string>{shared + "/sub", "is inside the folder of run 'con'"},
        {g_root + "/link/deeper/x", "is inside the folder of run 'con'"},
        {g_root, "holds the folder of run '"}}) {
    r = cli({"run", other, "--quiet", "--set", "run.out_dir=" + dir});
    CHECK_MSG(r.exit_code == 9 && has(r.output, want), "out_dir %s: exit %d\n%s", dir.c_str(), r.exit_code,
              r.output.c_str());
  }
  CHECK(run_count() == before);
  // A row stored in another spelling before folders were stored canonical still owns its folder.
  fs::create_directories(g_root + "/legacy");
  {
    db::Database d(g_root + "/store.db");
    db::NewRun row;
    row.name = "legacy";
    db::set_run_dir(d, db::create_run(d, row), g_root + "/legacy//");
  }
  r = cli({"run", other, "--quiet", "--set", "run.out_dir=" + g_root + "/legacy"});
  CHECK_MSG(r.exit_code == 9 && has(r.output, "belongs to run 'legacy'"), "exit %d\n%s", r.exit_code,
            r.output.c_str());
  // A new run reached through a symlink is stored under its real folder.
  fs::create_directories(g_root + "/real");
  fs::create_directory_symlink(g_root + "/real", g_root + "/alias");
  r = cli({"run", other, "--quiet", "--set", "run.out_dir=" + g_root + "/alias/"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const db::Database d(g_root + "/store.db");
  const std::string stored = db::get_run(d, "other").run_dir;
  CHECK_MSG(stored == fs::canonical(g_root + "/real").string(), "stored %s", stored.c_str());
}

}  // namespace

int main() {
  g_root = fs::canonical(fresh_dir("runs_names_cli")).string();
  bad_names_create_nothing();
  the_runs_layer_refuses_the_same_names();
  old_names_stay_addressable();
  option_like_values_are_usage_errors();
  one_folder_belongs_to_one_run();
  return summary("test_run_names_cli");
}
