// Creating runs (see run_setup.h for the naming scheme).
#include "runs/run_setup.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "db/errors.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "runs/worker_command.h"

namespace flotilla::runs {
namespace {

namespace fs = std::filesystem;

bool holds_files(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !fs::is_empty(dir, ec);
}

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw_io("cannot write " + path + " (check that the folder is writable and the disk has space)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw_io("cannot write " + path + ": " + ec.message());
}

}  // namespace

std::string new_run_name_problem(const std::string& name) {
  constexpr size_t kMaxLength = 64;
  const auto shown = [&] {
    std::string out;
    for (const char ch : name) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 0x20 || u == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", u);
        out += u == '\n' ? std::string("\\n") : u == '\t' ? std::string("\\t") : std::string(buf);
      } else {
        out += ch;
      }
    }
    return "'" + out + "'";
  };
  const auto is_alnum = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
  };
  const auto what = [](char ch) {
    const auto u = static_cast<unsigned char>(ch);
    return ch == ' '               ? std::string("a space")
           : u < 0x20 || u == 0x7f ? std::string("a control character")
                                   : "'" + std::string(1, ch) + "'";
  };
  std::string problem;
  if (name.empty()) {
    problem = "the name is empty";
  } else if (name.size() > kMaxLength) {
    problem = "it is " + std::to_string(name.size()) + " characters long";
  } else if (!is_alnum(name[0])) {
    problem = "it starts with " + what(name[0]);
  } else {
    for (size_t i = 0; i < name.size() && problem.empty(); ++i) {
      const char ch = name[i];
      if (!is_alnum(ch) && ch != '.' && ch != '_' && ch != '-')
        problem = "it has " + what(ch) + " at position " + std::to_string(i + 1);
    }
  }
  if (problem.empty()) return "";
  return "run name " + shown() + " is refused: " + problem +
         ". A run name is 1 to 64 characters from letters, digits, '.', '_' and '-', starting with a letter "
         "or digit (it names the run's folder)";
}

void check_new_run_name(const std::string& name) {
  const std::string problem = new_run_name_problem(name);
  if (!problem.empty()) throw Error(ExitCode::kConfig, problem + "; nothing was created");
}

void resolve_model_source(RunConfig& config) {
  interop::apply_hf_init_from(config);
  interop::apply_lora_init_from(config);  // a PEFT adapter to continue sets [lora]'s shape keys
}

void check_remote_write_paths(const RunConfig& config, const std::string& where) {
  for (const auto& [key, p] :
       {std::pair<const char*, const std::string&>{"checkpoint.export_hf", config.checkpoint.export_hf},
        {"checkpoint.export_peft", config.checkpoint.export_peft}}) {
    if (p.empty()) continue;
    const std::filesystem::path path(p);
    bool outside = path.is_absolute() || p.front() == '~' || p.front() == '$';
    for (const auto& part : path) outside = outside || part == "..";
    if (outside)
      throw Error(ExitCode::kConfig,
                  std::string(key) + " = \"" + p + "\": on " + where +
                      " the worker writes only inside its run folder (~/.flotilla/runs/<run>); "
                      "give a relative path such as \"export\" (it lands in the run folder)");
  }
}

void validate_run_config(const RunConfig& config, int ranks) {
  RunConfig resolved = config;
  resolve_model_source(resolved);
  validate_or_throw(resolved, ranks);
}

NewRun create_local_run(db::Writer& writer, const NewRunRequest& req) {
  const std::string base = req.name.empty() ? req.config.run.name : req.name;
  check_new_run_name(base);  // before any row, folder or process
  RunConfig config = req.config;
  if (req.max_restarts) config.run.max_restarts = *req.max_restarts;
  resolve_model_source(config);
  const int ranks = ranks_of(config);
  validate_run_config(config, ranks);
  const RunLimits limits = limits_of(config, req.budget_usd);
  const std::string root = absolute(req.runs_root.empty() ? std::string("runs") : req.runs_root);

  NewRun out;
  out.limits = limits;
  writer.run([&](db::Database& db) {
    db::write_tx(db, [&] {
      std::string name = base;
      // Stored canonical (symlinks resolved, no trailing '/'), so one folder has one spelling.
      const auto dir_of = [&](const std::string& n) {
        return db::canonical_run_dir(config.run.out_dir.empty() ? (fs::path(root) / n).string()
                                                                : absolute(config.run.out_dir));
      };
      if (req.explicit_name) {
        if (db::find_run(db, name))
          throw db::DbError(db::DbErrorKind::kConstraint,
                            "a run named '" + name +
                                "' already exists: choose another name, or continue it with "
                                "flotilla runs resume " +
                                name);
      } else {
        // The name, else NAME-2, NAME-3, ...: free in the store, and (for a default folder) not a
        // folder that already holds another run's files.
        for (int n = 2; db::find_run(db, name) || (config.run.out_dir.empty() && holds_files(dir_of(name)));
             ++n)
          name = base + "-" + std::to_string(n);
        check_new_run_name(name);  // NAME-2 can pass the length limit
      }
      const std::string dir = dir_of(name);
      if (const auto owner = db::find_run_by_dir(db, dir))
        throw db::DbError(db::DbErrorKind::kConstraint, "run directory " + dir + " belongs to run '" +
                                                            owner->name +
                                                            "': continue it with flotilla runs resume " +
                                                            owner->name + ", or set another run.out_dir");
      // Nor may two runs' folders nest: one run's purge, trash and deletion would reach the other's
      // files, and its folder listing would show them.
      if (const auto other = db::find_run_nested_with(db, dir)) {
        const std::string theirs = db::canonical_run_dir(other->run_dir);
        const bool within = db::canonical_run_dir(dir).rfind(theirs + "/", 0) == 0;
        throw db::DbError(db::DbErrorKind::kConstraint,
                          "run directory " + dir +
                              (within ? " is inside the folder of run '" : " holds the folder of run '") +
                              other->name + "' (" + theirs +
                              "): two runs' folders must not nest; set run.out_dir to a folder of its own");
      }
      config.run.name = name;
      config.run.out_dir = dir;
      db::NewRun row;
      row.name = name;
      row.config_toml = req.demo ? std::string() : config_to_toml(config);
      row.config_json = req.demo ? std::string("{}") : config_to_json(config, -1);
      row.run_dir = dir;
      row.notes = req.notes;
      row.budget_usd = limits.max_usd;
      row.budget_warn_fraction = limits.warn_fraction;
      row.max_hours = limits.max_hours;
      const int64_t id = req.fork_of ? db::fork_run(db, *req.fork_of, name) : db::create_run(db, row);
      if (req.fork_of) {
        db::set_run_config(db, id, row.config_toml, row.config_json);
        db::set_run_dir(db, id, dir);
        db::set_budget(db, id, limits.max_usd, limits.warn_fraction);
        db::set_max_hours(db, id, limits.max_hours);
      }
      db::attach_node(db, id, db::ensure_node(db, "local", "local"), ranks);
      out.price = resolve_run_price(db, id, config);
      check_budget_is_priced(out.price, limits, name, {"local"});
      db::set_run_price(db, id, out.price.usd_per_hour, out.price.source, out.price.shares);
      out.run_id = id;
      out.name = name;
      out.run_dir = dir;
    });
  });
  out.config = config;
  // The run's own folder holds the config it starts from. A folder that cannot be written
  // leaves no row behind.
  try {
    std::error_code ec;
    fs::create_directories(out.run_dir, ec);
    if (ec) throw_io("cannot create the run folder " + out.run_dir + ": " + ec.message());
    if (!req.demo) {
      out.config_path = out.run_dir + "/run.toml";
      write_file(out.config_path, config_to_toml(config));
    }
  } catch (const Error&) {
    try {
      writer.run([&](db::Database& db) { db::delete_run(db, out.run_id); });
    } catch (const db::DbError&) {
      // the settling of stale runs ends the row later
    }
    throw;
  }
  return out;
}

std::pair<std::string, std::string> place_unstored_run(const std::string& runs_root,
                                                       const std::string& base) {
  check_new_run_name(base);
  const std::string root = absolute(runs_root);
  std::string name = base;
  for (int n = 2; holds_files((fs::path(root) / name).string()); ++n) name = base + "-" + std::to_string(n);
  return {name, (fs::path(root) / name).string()};
}

RunPrice reprice_for_start(db::Writer& writer, int64_t run_id, const RunConfig& config,
                           std::optional<double> budget_usd) {
  RunPrice price;
  writer.run([&](db::Database& db) {
    db::write_tx(db, [&] {
      const db::Run run = db::get_run(db, run_id);
      RunLimits limits = limits_of(config, budget_usd);
      if (!budget_usd && run.budget_usd) limits.max_usd = run.budget_usd;  // a cap edited in Costs stays
      limits.warn_fraction = run.budget_warn_fraction;
      if (run.max_hours && !limits.max_hours) limits.max_hours = run.max_hours;
      price = resolve_run_price(db, run_id, config);
      std::vector<std::string> nodes;
      for (const auto& s : price.shares) nodes.push_back(s.node_name);
      check_budget_is_priced(price, limits, run.name, nodes);
      db::set_run_price(db, run_id, price.usd_per_hour, price.source, price.shares);
      store_limits(db, run_id, limits);
    });
  });
  return price;
}

std::string stored_config_file(const db::Run& run) {
  if (run.run_dir.empty()) return "";
  for (const char* name : {"config.toml", "run.toml"}) {
    const std::string p = run.run_dir + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  if (run.config_toml.empty()) return "";
  std::error_code ec;
  fs::create_directories(run.run_dir, ec);
  const std::string p = run.run_dir + "/flotilla-config.toml";
  try {
    write_file(p, run.config_toml);
  } catch (const Error&) {
    return "";
  }
  return p;
}

}  // namespace flotilla::runs
