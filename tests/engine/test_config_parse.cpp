// Run-config reader: a full file, presets, --set overrides, every kind of parse error (with its
// line and suggestion, all collected at once), the TOML round trip as a fixed point over random
// configs, JSON output and the config hash.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/core/error.h"

using namespace flotilla;

namespace {

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// The message of the Error(kConfig) `fn` throws ("" when it does not throw or throws another kind).
template <class Fn>
std::string config_error(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code() == ExitCode::kConfig ? std::string(e.what()) : std::string("wrong exit code");
  }
  return "";
}

void test_full_example() {
  const std::string text = R"(
[run]
name = "exp-1.b"
seed = 42
device = "cpu"
threads = 2

[model]
preset = "gpt2-124m"
vocab_size = 50257
max_seq_len = 1024

[data]
source = "shards"
train = "data/fineweb_train_*.bin"
val = "data/fineweb_val_*.bin"
shuffle = true

[train]
steps = 5000
micro_batch = 16
seq_len = 1024
global_batch_tokens = 524288
grad_clip = 1.0

[optim]
lr = 6e-4
schedule = "wsd"
warmup_steps = 700
decay_fraction = 0.2
weight_decay = 0  # an integer where a float is expected is accepted

[parallel]
dp = 2
zero = 1

[checkpoint]
every = 1000
keep_last = 3

[eval]
every = 250

[budget]
max_usd = 25.5
usd_per_hour = 3
)";
  const RunConfig c = parse_config_toml(text, "full.toml");
  CHECK(c.run.name == "exp-1.b");
  CHECK(c.run.seed == 42);
  CHECK(c.run.threads == 2);
  CHECK(c.model.preset == "gpt2-124m");
  CHECK(c.model.n_layer == 12 && c.model.n_head == 12 && c.model.n_embd == 768);  // from the preset
  CHECK(c.data.source == "shards" && c.data.train == "data/fineweb_train_*.bin" && c.data.shuffle);
  CHECK(c.train.steps == 5000 && c.train.micro_batch == 16 && c.train.global_batch_tokens == 524288);
  CHECK(c.optim.schedule == "wsd" && c.optim.warmup_steps == 700);
  CHECK(c.optim.lr == 6e-4 && c.optim.weight_decay == 0.0);
  CHECK(c.parallel.dp == 2 && c.parallel.zero == 1);
  CHECK(c.checkpoint.every == 1000 && c.checkpoint.keep_last == 3);
  CHECK(c.budget.max_usd == 25.5 && c.budget.usd_per_hour == 3.0);
  // Untouched keys keep the defaults from run_config.h.
  const RunConfig d;
  CHECK(c.optim.beta2 == d.optim.beta2 && c.eval.batches == d.eval.batches && c.train.dtype == "fp32");
  // An empty document is the default config.
  CHECK(configs_equal(parse_config_toml("", "empty.toml"), RunConfig{}));
}

void test_presets() {
  RunConfig c = parse_config_toml("[model]\npreset = \"small\"\n", "p.toml");
  CHECK(c.model.n_layer == 6 && c.model.n_head == 6 && c.model.n_embd == 384);
  // Explicit dims win over the preset, in either order in the file.
  c = parse_config_toml("[model]\nn_layer = 3\npreset = \"gpt2-1.5b\"\n", "p.toml");
  CHECK(c.model.n_layer == 3 && c.model.n_head == 25 && c.model.n_embd == 1600);
  // custom keeps the given dims.
  c = parse_config_toml("[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 64\n", "p.toml");
  CHECK(c.model.n_layer == 2 && c.model.n_head == 2 && c.model.n_embd == 64);
  const std::string e =
      config_error([] { parse_config_toml("[model]\npreset = \"gpt2-125m\"\n", "p.toml"); });
  CHECK_MSG(contains(e, "p.toml:2: model.preset: unknown value \"gpt2-125m\" (did you mean \"gpt2-124m\"?)"),
            "%s", e.c_str());
  CHECK_MSG(contains(e,
                     "tiny, small, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, llama-tiny, smollm2-135m, "
                     "qwen2.5-0.5b, qwen3-0.6b, llama3.2-1b, llama3.1-8b, qwen2.5-7b, qwen3-8b, custom"),
            "%s", e.c_str());
}

void test_unknown_keys_and_sections() {
  const std::string text =
      "[run]\n"         // 1
      "name = \"x\"\n"  // 2
      "\n"              // 3
      "[optim]\n"       // 4
      "lr = 1e-3\n"     // 5
      "\n"              // 6
      "warmup = 10\n"   // 7
      "[trian]\n"       // 8
      "steps = 5\n"     // 9
      "[train]\n"       // 10
      "stpes = 5\n"     // 11
      "lr = 0.1\n";     // 12
  const std::string e = config_error([&] { parse_config_toml(text, "run.toml"); });
  CHECK_MSG(contains(e, "run.toml: 4 errors in the run config"), "%s", e.c_str());
  CHECK_MSG(contains(e, "run.toml:7: unknown key 'optim.warmup' (did you mean 'optim.warmup_steps'?)"), "%s",
            e.c_str());
  CHECK_MSG(contains(e, "run.toml:8: unknown section [trian] (did you mean [train]?)"), "%s", e.c_str());
  CHECK_MSG(contains(e, "run.toml:11: unknown key 'train.stpes' (did you mean 'train.steps'?)"), "%s",
            e.c_str());
  CHECK_MSG(contains(e, "run.toml:12: unknown key 'train.lr' (did you mean 'optim.lr'?)"), "%s", e.c_str());
  // In file order, not in the parser's key order.
  CHECK(e.find("run.toml:7:") < e.find("run.toml:8:") && e.find("run.toml:8:") < e.find("run.toml:11:") &&
        e.find("run.toml:11:") < e.find("run.toml:12:"));
  // A top-level key that belongs in a section, a nested table, a section given as a value.
  const std::string e2 =
      config_error([] { parse_config_toml("steps = 3\n[model.extra]\na = 1\n", "t.toml"); });
  CHECK_MSG(contains(e2, "t.toml:1: unknown key 'steps' (did you mean 'train.steps'?)"), "%s", e2.c_str());
  CHECK_MSG(contains(e2, "unknown key 'model.extra'"), "%s", e2.c_str());
  const std::string e3 = config_error([] { parse_config_toml("train = 5\n", "t.toml"); });
  CHECK_MSG(contains(e3, "t.toml:1: 'train' must be a table ([train]), got integer"), "%s", e3.c_str());
  // Nothing close: no suggestion.
  const std::string e4 = config_error([] { parse_config_toml("[eval]\nzzzzqqqq = 1\n", "t.toml"); });
  CHECK_MSG(contains(e4, "unknown key 'eval.zzzzqqqq'") && !contains(e4, "did you mean"), "%s", e4.c_str());
}

void test_wrong_types() {
  const std::string text =
      "[train]\n"
      "steps = \"fifty\"\n"  // 2
      "micro_batch = 2.5\n"  // 3
      "recompute = 1\n"      // 4
      "[optim]\n"
      "lr = \"fast\"\n"  // 6
      "[model]\n"
      "n_layer = 5000000000\n"  // 8
      "arch = 7\n"              // 9
      "[run]\n"
      "seed = -1\n"         // 11
      "device = \"gpu\"\n"  // 12
      "[data]\n"
      "train = [\"a\", \"b\"]\n";  // 14
  const std::string e = config_error([&] { parse_config_toml(text, "types.toml"); });
  CHECK_MSG(contains(e, "9 errors"), "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:2: train.steps: expected an integer, got string (\"fifty\")"), "%s",
            e.c_str());
  CHECK_MSG(contains(e, "types.toml:3: train.micro_batch: expected an integer, got float (2.5)"), "%s",
            e.c_str());
  CHECK_MSG(contains(e, "types.toml:4: train.recompute: expected a boolean (true or false), got integer (1)"),
            "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:6: optim.lr: expected a float, got string (\"fast\")"), "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:8: model.n_layer: 5000000000 does not fit a 32-bit integer"), "%s",
            e.c_str());
  CHECK_MSG(contains(e, "types.toml:9: model.arch: expected a string, got integer (7)"), "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:11: run.seed: expected a non-negative integer, got -1"), "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:12: run.device: unknown value \"gpu\""), "%s", e.c_str());
  CHECK_MSG(contains(e, "types.toml:14: data.train: expected a string, got array"), "%s", e.c_str());
  // Not TOML at all: the parser's position and reason.
  const std::string bad = config_error([] { parse_config_toml("[train]\nsteps = = 3\n", "bad.toml"); });
  CHECK_MSG(contains(bad, "bad.toml:2:") && contains(bad, "not valid TOML"), "%s", bad.c_str());
  const std::string dup =
      config_error([] { parse_config_toml("[train]\nsteps = 1\nsteps = 2\n", "dup.toml"); });
  CHECK_MSG(contains(dup, "dup.toml:3:"), "%s", dup.c_str());
}

void test_overrides() {
  RunConfig c;
  apply_override(c, "train.steps=50");
  CHECK(c.train.steps == 50);
  apply_override(c, " optim.lr = 3e-4 ");
  CHECK(c.optim.lr == 3e-4);
  apply_override(c, "optim.weight_decay=1");  // integer into a float
  CHECK(c.optim.weight_decay == 1.0);
  apply_override(c, "data.shuffle=true");
  CHECK(c.data.shuffle);
  apply_override(c, "run.name=exp2");  // bare string
  CHECK(c.run.name == "exp2");
  apply_override(c, "run.name=\"with space\"");  // TOML string
  CHECK(c.run.name == "with space");
  apply_override(c, "run.name=1.5");  // bare text that happens to be a number stays text for a string key
  CHECK(c.run.name == "1.5");
  apply_override(c, "model.preset=gpt2-350m");  // sets the preset's dims
  CHECK(c.model.n_layer == 24 && c.model.n_head == 16 && c.model.n_embd == 1024);

  // Preset overrides go first, so a dimension override refines it whatever the order.
  RunConfig o;
  apply_overrides(o, {"model.n_layer=2", "model.preset=small"});
  CHECK(o.model.preset == "small" && o.model.n_layer == 2 && o.model.n_embd == 384);

  std::string e = config_error([] {
    RunConfig x;
    apply_override(x, "train.step=5");
  });
  CHECK_MSG(contains(e, "unknown key 'train.step' (did you mean 'train.steps'?)"), "%s", e.c_str());
  e = config_error([] {
    RunConfig x;
    apply_override(x, "train.steps=abc");
  });
  CHECK_MSG(contains(e, "train.steps: expected an integer, got 'abc'"), "%s", e.c_str());
  e = config_error([] {
    RunConfig x;
    apply_override(x, "train.steps");
  });
  CHECK_MSG(contains(e, "expected key=value"), "%s", e.c_str());
  e = config_error([] {
    RunConfig x;
    apply_override(x, "optim.schedule=cosin");
  });
  CHECK_MSG(contains(e, "did you mean \"cosine\"?"), "%s", e.c_str());
  // Every error of a command line at once.
  e = config_error([] {
    RunConfig x;
    apply_overrides(x, {"train.steps=x", "eval.every=1", "nope.key=1"});
  });
  CHECK_MSG(contains(e, "2 errors") && contains(e, "train.steps") && contains(e, "nope.key"), "%s",
            e.c_str());
}

// A config with every key set to a random value of its type (valid choices for enumerated keys).
RunConfig random_config(std::mt19937_64& rng) {
  RunConfig c;
  const std::string alphabet = "abcXYZ09 _-./\"\\\t\n\x01\x7f";
  const char* unicode[] = {"\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x9a\x80"};
  for (const auto& key : config_keys()) {
    void* p = field_ptr(key, c);
    switch (key.storage) {
      case FieldStorage::kString: {
        std::string s;
        if (!key.choices.empty()) {
          s = key.choices[rng() % key.choices.size()];
        } else {
          const size_t n = rng() % 12;
          for (size_t i = 0; i < n; ++i)
            s += rng() % 5 ? std::string(1, alphabet[rng() % alphabet.size()]) : unicode[rng() % 3];
        }
        *static_cast<std::string*>(p) = s;
        break;
      }
      case FieldStorage::kInt32:
        *static_cast<int*>(p) = static_cast<int>(static_cast<uint32_t>(rng()));
        break;
      case FieldStorage::kInt64:
        *static_cast<int64_t*>(p) = static_cast<int64_t>(rng());
        break;
      case FieldStorage::kUint64:
        *static_cast<uint64_t*>(p) = rng() >> 1;
        break;  // TOML ints are signed
      case FieldStorage::kDouble: {
        double v;
        const uint64_t pick = rng() % 8;
        if (pick == 0)
          v = std::numeric_limits<double>::quiet_NaN();
        else if (pick == 1)
          v = (rng() & 1) ? HUGE_VAL : -HUGE_VAL;
        else if (pick == 2)
          v = (rng() & 1) ? 0.0 : -0.0;
        else if (pick == 3)
          v = std::numeric_limits<double>::denorm_min() * static_cast<double>(rng() % 1000 + 1);
        else {
          uint64_t bits = rng();
          std::memcpy(&v, &bits, sizeof v);
          if (!std::isfinite(v)) v = 1.0 / 3.0;
        }
        *static_cast<double*>(p) = v;
        break;
      }
      case FieldStorage::kBool:
        *static_cast<bool*>(p) = rng() & 1;
        break;
    }
  }
  return c;
}

void test_round_trip_fixed_point() {
  std::mt19937_64 rng(20240520);
  std::vector<RunConfig> configs = {RunConfig{}, parse_config_toml("[model]\npreset = \"gpt2-1.5b\"\n", "x")};
  for (int i = 0; i < 300; ++i) configs.push_back(random_config(rng));
  int failures = 0;
  for (const auto& c : configs) {
    const std::string text = config_to_toml(c);
    RunConfig back;
    try {
      back = parse_config_toml(text, "round-trip.toml");
    } catch (const Error& e) {
      if (failures++ < 3) std::fprintf(stderr, "round trip parse failed: %s\n%s\n", e.what(), text.c_str());
      continue;
    }
    const auto diff = config_diff(c, back);
    if (!diff.empty() && failures++ < 3)
      std::fprintf(stderr, "round trip changed %s\n%s\n", diff.front().c_str(), text.c_str());
    // The text is a fixed point too.
    if (config_to_toml(back) != text && failures++ < 3) std::fprintf(stderr, "text not a fixed point\n");
  }
  CHECK_MSG(failures == 0, "%d of %zu configs did not round-trip", failures, configs.size());
  // Every key appears in the output, in schema order.
  const std::string text = config_to_toml(RunConfig{});
  size_t pos = 0;
  for (const auto& key : config_keys()) {
    const size_t at = text.find("\n" + key.name + " = ", pos);
    CHECK_MSG(at != std::string::npos, "%s missing or out of order", key.path().c_str());
    if (at != std::string::npos) pos = at;
  }
}

void test_json_and_hash() {
  RunConfig c;
  c.run.name = "j\"son";
  c.train.steps = 77;
  const auto j = nlohmann::json::parse(config_to_json(c));
  CHECK(j["run"]["name"] == "j\"son");
  CHECK(j["train"]["steps"] == 77);
  CHECK(j["optim"]["lr"].get<double>() == 6e-4);
  size_t keys = 0;
  for (const auto& [section, values] : j.items()) keys += values.size();
  CHECK(keys == config_keys().size());

  // The hash covers the model shape only, and is a fixed function (checkpoints persist it).
  RunConfig a, b;
  b.optim.lr = 1.0;
  b.train.steps = 3;
  b.parallel.dp = 8;
  CHECK(config_hash(a) == config_hash(b));
  b.model.n_layer = 5;
  CHECK(config_hash(a) != config_hash(b));
  RunConfig v;
  v.model.vocab_size = 50258;
  CHECK(config_hash(a) != config_hash(v));
  // FNV-1a of "model.arch=\"gpt2\"\nmodel.n_layer=4\n...model.max_seq_len=1024\n", computed independently.
  CHECK_MSG(config_hash(a) == 0xd94c5d4716f3ae08ull, "hash of the default config changed: 0x%016llx",
            static_cast<unsigned long long>(config_hash(a)));
}

void test_load_file() {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/test_config_parse";
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string path = dir + "/run.toml";
  std::ofstream(path) << "[train]\nsteps = 12\n";
  CHECK(load_config_file(path).train.steps == 12);
  CHECK(load_config(path, {"train.steps=13"}).train.steps == 13);
  const std::string e = config_error([&] { load_config_file(dir + "/missing.toml"); });
  CHECK_MSG(contains(e, "missing.toml") && contains(e, "No such file"), "%s", e.c_str());
  std::ofstream(path) << "[train]\nsteps = \"x\"\n";
  const std::string e2 = config_error([&] { load_config_file(path); });
  CHECK_MSG(contains(e2, path + ":2: train.steps"), "%s", e2.c_str());
}

// Issue 19 defect 3: a directory (or a FIFO, a device) is not a config. A directory used to read
// as an empty config and train the defaults.
void test_not_a_regular_file() {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/test_config_parse_dir";
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "/sub' && mkfifo '" + dir + "/fifo'").c_str());
  for (auto load : {+[](const std::string& p) { load_config_file(p); },
                    +[](const std::string& p) { load_config(p, {"train.steps=3"}); }}) {
    const std::string e = config_error([&] { load(dir + "/sub"); });
    CHECK_MSG(contains(e, dir + "/sub' is a directory") && contains(e, "pass the config file itself"), "%s",
              e.c_str());
    const std::string f = config_error([&] { load(dir + "/fifo"); });  // would block on open if read
    CHECK_MSG(contains(f, "fifo' is not a regular file"), "%s", f.c_str());
  }
}

// Issue 19 defect 4: type errors and value errors of one config come out in one message (a type
// error used to stop before validation, hiding the rest).
void test_type_and_value_errors_at_once() {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/test_config_parse_both";
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string path = dir + "/run.toml";
  std::ofstream(path) << "[train]\nsteps = \"fifty\"\nmicro_batch = 0\n[optim]\nlr = -1.0\n";
  const std::string e = config_error([&] { load_config(path, {"checkpoint.keep_last=0"}); });
  CHECK_MSG(contains(e, path + ":2: train.steps: expected an integer"), "%s", e.c_str());
  CHECK_MSG(
      contains(e, "train.micro_batch") && contains(e, "optim.lr") && contains(e, "checkpoint.keep_last"),
      "%s", e.c_str());
  CHECK_MSG(contains(e, "4 errors"), "%s", e.c_str());
  // A bad --set and a bad file value together.
  std::ofstream(path) << "[optim]\nlr = -1.0\n";
  const std::string e2 = config_error([&] { load_config(path, {"train.steps=x"}); });
  CHECK_MSG(contains(e2, "train.steps") && contains(e2, "optim.lr"), "%s", e2.c_str());
}

}  // namespace

int main() {
  test_full_example();
  test_presets();
  test_unknown_keys_and_sections();
  test_wrong_types();
  test_overrides();
  test_round_trip_fixed_point();
  test_json_and_hash();
  test_load_file();
  test_not_a_regular_file();
  test_type_and_value_errors_at_once();
  return flotilla_test::summary("test_config_parse");
}
