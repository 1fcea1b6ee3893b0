// The flotilla-worker subcommands (DESIGN.md §4). Each lives in its own cmd_<name>.cpp and
// receives the arguments after its name; it returns an exit code (engine/core/error.h) or throws
// flotilla::Error, which worker_main turns into a message on stderr and that error's exit code.
#pragma once

#include <string>
#include <vector>

namespace flotilla::cli {

using CommandArgs = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;  // one line, shown by --help
  int (*run)(const CommandArgs& args);
};

// The registered commands, in --help order.
const std::vector<Command>& commands();

// Entry point of the flotilla-worker executable.
int worker_main(int argc, char** argv);

int cmd_train(const CommandArgs& args);
int cmd_launch(const CommandArgs& args);
int cmd_demo(const CommandArgs& args);
int cmd_bench(const CommandArgs& args);
int cmd_plan(const CommandArgs& args);
int cmd_data(const CommandArgs& args);
int cmd_tokenizer(const CommandArgs& args);
int cmd_export(const CommandArgs& args);
int cmd_sample(const CommandArgs& args);
int cmd_probe(const CommandArgs& args);
int cmd_bench_comm(const CommandArgs& args);
int cmd_bench_nf4(const CommandArgs& args);
int cmd_bench_generate(const CommandArgs& args);
int cmd_hub(const CommandArgs& args);
int cmd_eval(const CommandArgs& args);
int cmd_chat(const CommandArgs& args);
int cmd_links(const CommandArgs& args);
int cmd_bench_attention(const CommandArgs& args);

}  // namespace flotilla::cli
