// flotilla-worker launch --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//                        [--max-restarts K] [...] -- train --config run.toml ...
//
// SIGHUP (the terminal that started launch closed) becomes the SIGTERM that launch forwards to its
// ranks, so they checkpoint and stop instead of running on unsupervised (unless SIGHUP was ignored
// when launch started, as under nohup: then it stays ignored).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/launch/gpu_pinning.h"
#include "engine/launch/launcher.h"
#include "engine/launch/preflight.h"

namespace flotilla::cli {
namespace {
void hangup_as_term(int) { ::kill(::getpid(), SIGTERM); }  // async-signal-safe
}  // namespace

int cmd_launch(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker launch --nproc-per-node N [options] -- <worker command>\n\n"
        "Starts N ranks of the worker command on this node with RANK, LOCAL_RANK, WORLD_SIZE,\n"
        "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (torchrun's environment), pins each rank\n"
        "to its share of the CPU cores, merges their output (stderr lines prefixed [rank R]; metrics\n"
        "JSON on stdout passes through), forwards SIGTERM/SIGINT, and supervises: when a rank dies or\n"
        "makes no progress, the whole group is ended (SIGTERM, grace, SIGKILL), the root cause is\n"
        "reported, and the group restarts from the last verified checkpoint up to --max-restarts\n"
        "times. Preemptions (exit 10) do not use the budget; config, data, usage, checkpoint, I/O (a\n"
        "full disk) and out-of-memory errors never retry. A rank gets SIGTERM when launch dies.\n\n"
        "Options:\n"
        "  --nproc-per-node N    ranks on this node (one per GPU or CPU slot)\n"
        "  --nnodes M            nodes in the run (default 1)\n"
        "  --node-rank R         this node's index (default 0)\n"
        "  --master-addr A       rank 0's host (default 127.0.0.1)\n"
        "  --master-port P       rendezvous port (default 29500; 0 = pick a free one, single node)\n"
        "  --max-restarts K      crash restarts (default 0)\n"
        "  --init-timeout S      seconds until every rank reports its first step (default 300)\n"
        "  --step-timeout S      seconds without progress before a rank is declared stalled (default 100;\n"
        "                        at least 3x the slowest step the rank has taken)\n"
        "  --term-grace S        seconds between SIGTERM and SIGKILL when ending the group (default 10)\n"
        "  --no-bind             do not pin ranks to cores\n"
        "  --gpus LIST           CUDA ordinals for local ranks 0, 1, ... (e.g. 0,2); default: rank l uses\n"
        "                        GPU l. Ranks of a run.device = \"cuda\" config (or with --gpus) get\n"
        "                        FLOTILLA_CUDA_DEVICE; fewer GPUs than ranks is refused before any starts\n");
    return 0;
  }
  LaunchOptions o;
  o.nproc_per_node = static_cast<int>(args.int_or("--nproc-per-node", 1));
  o.nnodes = static_cast<int>(args.int_or("--nnodes", 1));
  o.node_rank = static_cast<int>(args.int_or("--node-rank", 0));
  o.master_addr = args.value_or("--master-addr", "127.0.0.1");
  o.master_port = static_cast<int>(args.int_or("--master-port", 29500));
  o.max_restarts = static_cast<int>(args.int_or("--max-restarts", 0));
  o.init_timeout_s = args.double_or("--init-timeout", 300);
  o.step_timeout_s = args.double_or("--step-timeout", 100);
  o.term_grace_s = args.double_or("--term-grace", 10);
  o.bind_cores = !args.flag("--no-bind");
  o.gpus = parse_gpu_list(args.value_or("--gpus", ""), "--gpus");
  o.worker_args = args.rest_after_dashdash();
  o.device = worker_run_device(o.worker_args);
  args.finish("launch");
  try {
    preflight_worker_data(o.worker_args);  // a damaged shard: exit 4 before any rank starts (C9)
  } catch (const Error& e) {
    // The root cause also goes into the metrics stream (stdout), as launch reports a failed rank.
    const nlohmann::ordered_json ev = {{"v", 1},
                                       {"type", "event"},
                                       {"rank", 0},
                                       {"level", "error"},
                                       {"message", e.what()},
                                       {"failed_rank", -1},
                                       {"exit_code", static_cast<int>(e.code())}};
    const std::string line = ev.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    throw;
  }
  struct sigaction hup {
  }, old{};
  hup.sa_handler = hangup_as_term;
  sigemptyset(&hup.sa_mask);
  // Unless ignored on entry (nohup, a detached run on a node): then the hang-up stays ignored.
  if (sigaction(SIGHUP, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(SIGHUP, &hup, nullptr);
  return run_launch(o);
}

}  // namespace flotilla::cli
