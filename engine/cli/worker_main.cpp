// flotilla-worker: dispatch to subcommands; the one place where engine errors reach the user.
//
// Decision: SIGPIPE is ignored for every command, before anything runs. The worker's stdout and
// stderr are often pipes to whoever started it (`flotilla run`, a shell pipeline); when that
// process goes away the next write would kill the worker by SIGPIPE, mid-step, with no emergency
// checkpoint. Ignored, a write to a closed pipe only fails (EPIPE); metrics.jsonl stays the record,
// and a stop arrives as a signal (SIGTERM from the parent's death signal, SIGHUP from a closed
// terminal), which the trainer turns into a checkpoint and exit 10. Ignored signals stay ignored
// across exec, so launch's ranks inherit it.
#include <csignal>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"

namespace flotilla::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "train a model from a run config (TOML); resumes from the newest verified checkpoint",
       cmd_train},
      {"launch",
       "start and supervise N ranks of a command (torchrun-style): restarts, stall detection, root cause",
       cmd_launch},
      {"demo", "synthetic corpus + tiny GPT on the CPU in one command; prints the loss falling", cmd_demo},
      {"bench", "measure training speed and MFU against this machine's measured matmul peak", cmd_bench},
      {"plan", "parameters, FLOPs per token, memory per device and predicted step time for a config",
       cmd_plan},
      {"data", "token shards: synth (demo corpus), prepare (text/JSONL -> shards), inspect", cmd_data},
      {"tokenizer",
       "byte-level BPE: train on text, encode, decode (also loads GPT-2 vocab.json + merges.txt)",
       cmd_tokenizer},
      {"export", "write a checkpoint's model as safetensors (Hugging Face GPT-2 names) or llm.c .bin",
       cmd_export},
      {"sample", "generate text from a checkpoint or a Hugging Face model", cmd_sample},
      {"probe", "report this machine: OS, CPU, SIMD, memory, GPUs, driver, CUDA/NCCL/BLAS versions",
       cmd_probe},
      {"bench-comm",
       "collective bandwidth (all_reduce, reduce_scatter, all_gather, broadcast), nccl-tests style",
       cmd_bench_comm},
      {"bench-nf4",
       "QLoRA's 4-bit (NF4) matmuls against the dense matmul of the same shape, GFLOP/s and ratio",
       cmd_bench_nf4},
      {"bench-generate", "generation tokens/s (prefill and decode) of a model with the KV cache",
       cmd_bench_generate},
      {"hub", "models by name: resolve in the Hugging Face cache, download from the Hub what it lacks",
       cmd_hub},
      {"eval", "score a model on a task file: multiple choice (acc, acc_norm), perplexity, exact match",
       cmd_eval},
      {"chat", "the chat playground's server: loads a model once, JSON requests in, streamed JSON out",
       cmd_chat},
      {"links", "the link matrix between the nodes of a run over its transport (latency, bandwidth per pair)",
       cmd_links},
      {"bench-attention",
       "CPU attention forward/backward: the flash-style kernels against the previous ones, ms and GFLOP/s",
       cmd_bench_attention},
  };
  return table;
}

static void print_help() {
  std::printf(
      "flotilla-worker %s - the Flotilla training engine\n\n"
      "Usage: flotilla-worker <command> [options]\n"
      "       flotilla-worker <command> --help\n\n"
      "Commands:\n",
      FLOTILLA_VERSION_STRING);
  for (const auto& c : commands()) std::printf("  %-10s %s\n", c.name, c.summary);
  std::printf(
      "\nGlobal options:\n"
      "  --help       show this help\n"
      "  --version    print the version\n\n"
      "Exit codes: 0 ok, 1 internal error, 2 usage, 3 config, 4 data, 5 checkpoint, 6 I/O,\n"
      "            7 communication, 8 out of memory, 10 preempted, 11 stalled (docs/worker.md)\n");
}

int worker_main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    print_help();
    return static_cast<int>(ExitCode::kUsage);
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_help();
    return 0;
  }
  if (name == "--version" || name == "-V") {
    std::printf("flotilla-worker %s\n", FLOTILLA_VERSION_STRING);
    return 0;
  }
  for (const auto& c : commands()) {
    if (name != c.name) continue;
    CommandArgs args(argv + 2, argv + argc);
    try {
      return c.run(args);
    } catch (const Error& e) {
      std::fprintf(stderr, "flotilla-worker %s: %s: %s\n", c.name, exit_code_name(e.code()), e.what());
      return static_cast<int>(e.code());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "flotilla-worker %s: out of memory: reduce train.micro_batch or the model size\n",
                   c.name);
      return static_cast<int>(ExitCode::kOutOfMemory);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flotilla-worker %s: internal error: %s\n", c.name, e.what());
      return static_cast<int>(ExitCode::kInternal);
    }
  }
  std::fprintf(stderr, "flotilla-worker: unknown command '%s' (see flotilla-worker --help)\n", name.c_str());
  return static_cast<int>(ExitCode::kUsage);
}

}  // namespace flotilla::cli
