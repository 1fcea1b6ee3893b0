// The batch script the wizard's Review page shows for a Slurm target (runs::preview_slurm_script):
// the script submit_slurm_run generates (the same spec builder), with the paths only the login node
// knows written "~", ID and HASH; the time limit, the USR1 lead, requeue only with auto-resume, one
// task per rank over the nodes; its price; and every problem that would refuse the submission,
// each naming its field, with no script for a hostile partition or account or a budget on an
// unpriced partition.
#include <cstdio>
#include <string>

#include "runs/slurm_run.h"

namespace {
int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

flotilla::runs::SlurmStartRequest request() {
  flotilla::runs::SlurmStartRequest r;
  r.config.parallel.dp = 2;
  r.name = "my run";
  r.nodes = 2;
  r.time_limit = "00:30:00";
  r.version = "1.2.3";
  return r;
}

}  // namespace

int main() {
  flotilla::db::SlurmCluster cluster;
  cluster.name = "hpc";
  cluster.partition = "cpu";
  cluster.account = "ml-team";
  flotilla::db::PartitionPrice price;
  price.partition = "cpu";
  price.usd_per_cpu_hour = 0.05;

  {  // dp 2 over 2 nodes: one task each; the cluster's defaults; no requeue without auto-resume
    const auto p = flotilla::runs::preview_slurm_script(cluster, request(), price);
    expect(p.problems.empty(), "no problem for a valid request");
    const std::string& s = p.script;
    std::printf("%s", s.c_str());
    expect(s.rfind("#!/bin/sh\n", 0) == 0, "a shell script");
    expect(has(s, "#SBATCH --job-name=flotilla-my_run-ID\n"), "job name from the run name, ID for the number");
    expect(has(s, "#SBATCH --partition=cpu\n"), "the cluster's default partition");
    expect(has(s, "#SBATCH --account=ml-team\n"), "the cluster's default account");
    expect(has(s, "#SBATCH --nodes=2\n") && has(s, "#SBATCH --ntasks-per-node=1\n"), "2 nodes x 1 task");
    expect(has(s, "#SBATCH --time=00:30:00\n"), "the finite time limit");
    expect(has(s, "#SBATCH --signal=B:USR1@300\n"), "USR1 300 s before the limit");
    expect(has(s, "#SBATCH --no-requeue\n") && !has(s, "#SBATCH --requeue\n"), "no requeue without auto-resume");
    expect(has(s, "#SBATCH --open-mode=append\n"), "output appended across attempts");
    expect(has(s, "#SBATCH --output=~/.flotilla/runs/my_run-ID/slurm.out\n"), "output in the run folder");
    expect(has(s, "srun --kill-on-bad-exit=1"), "srun kills the job when a task fails");
    expect(has(s, "worker='~/.flotilla/bin/1.2.3-HASH/flotilla-worker'"), "the deployed worker's path");
    expect(has(s, "# Preview: "), "the preview says what ~, ID and HASH stand for");
    expect(!has(s, "flotilla-preview-home"), "no stand-in path left");
    expect(p.tasks_per_node == 1, "tasks per node 1");
    expect(p.price.usd_per_hour > 0.099 && p.price.usd_per_hour < 0.101, "2 CPU tasks x $0.05/CPU-h = $0.10/h");
  }
  {  // auto-resume, a partition and lead of the user's
    auto r = request();
    r.auto_resume = true;
    r.partition = "short";
    r.signal_lead_s = 120;
    r.gpus_per_node = 4;
    r.config.parallel.dp = 8;
    const auto p = flotilla::runs::preview_slurm_script(cluster, r, std::nullopt);
    expect(p.problems.empty(), "no problem with auto-resume");
    expect(has(p.script, "#SBATCH --requeue\n"), "requeue with auto-resume");
    expect(has(p.script, "#SBATCH --partition=short\n"), "the user's partition");
    expect(has(p.script, "#SBATCH --signal=B:USR1@120\n"), "the user's lead");
    expect(has(p.script, "#SBATCH --gpus-per-node=4\n") && has(p.script, "#SBATCH --ntasks-per-node=4\n"),
           "4 GPUs and 4 tasks per node");
    expect(p.price.usd_per_hour == 0 && p.price.source.empty(), "an unpriced partition has no price");
  }
  {  // every refusal names its field, and nothing is generated
    auto r = request();
    r.partition = "cpu;rm -rf ~";
    r.account = "$(id)";
    r.time_limit = "forever";
    r.config.parallel.dp = 3;
    const auto p = flotilla::runs::preview_slurm_script(cluster, r, price);
    std::string all;
    for (const auto& m : p.problems) all += m + "\n";
    std::printf("%s", all.c_str());
    expect(p.script.empty(), "no script for a refused request");
    expect(has(all, "partition"), "the partition is named");
    expect(has(all, "account"), "the account is named");
    expect(has(all, "time limit"), "the time limit is named");
    expect(has(all, "3") && has(all, "2 node"), "the layout that does not split over the nodes is named");
  }
  {  // a lead as long as the limit
    auto r = request();
    r.time_limit = "00:05:00";
    const auto p = flotilla::runs::preview_slurm_script(cluster, r, price);
    expect(p.script.empty() && p.problems.size() == 1 && has(p.problems[0], "signal lead"),
           "a lead of 300 s in a 5-minute limit is refused");
  }
  {  // a budget on a partition nothing prices: refused with the command that prices it
    auto r = request();
    r.config.budget.max_usd = 5;
    const auto p = flotilla::runs::preview_slurm_script(cluster, r, std::nullopt);
    expect(p.script.empty() && p.problems.size() == 1 && has(p.problems[0], "budget") &&
               has(p.problems[0], "flotilla clusters price hpc cpu"),
           "a budget needs a price: " + (p.problems.empty() ? std::string() : p.problems[0]));
    expect(flotilla::runs::preview_slurm_script(cluster, r, price).problems.empty(), "priced: accepted");
  }
  {  // the price from what Slurm allocated: every core of a whole node, the GPUs given
    const auto whole = flotilla::runs::slurm_price_allocated(price, "cpu=64,mem=250G,node=2,billing=64", false);
    expect(whole && whole->usd_per_hour > 3.199 && whole->usd_per_hour < 3.201 &&
               has(whole->source, "64 allocated CPU(s)"),
           "64 allocated CPUs x $0.05/CPU-h = $3.20/h");
    flotilla::db::PartitionPrice gpu;
    gpu.partition = "gpu";
    gpu.usd_per_gpu_hour = 2.0;
    const auto typed =
        flotilla::runs::slurm_price_allocated(gpu, "cpu=8,node=1,gres/gpu=8,gres/gpu:a100=8", true);
    expect(typed && typed->usd_per_hour == 16.0, "gres/gpu=8 with its typed twin counts 8 GPUs once");
    const auto only_typed = flotilla::runs::slurm_price_allocated(gpu, "cpu=8,gres/gpu:a100=4,gres/gpu:v100=2", true);
    expect(only_typed && only_typed->usd_per_hour == 12.0, "typed GPUs alone are summed");
    expect(!flotilla::runs::slurm_price_allocated(gpu, "cpu=8,node=1", true), "a GPU job with no GPU in TRES: kept");
    expect(!flotilla::runs::slurm_price_allocated(std::nullopt, "cpu=8", false), "an unpriced partition: kept");
    expect(!flotilla::runs::slurm_price_allocated(price, "", false), "no TRES: kept");
    expect(!flotilla::runs::slurm_price_allocated(price, "cpu=x;rm,node=1", false), "garbage: kept");
    // The same counts become the job's device-hours.
    const auto a = flotilla::runs::parse_alloc_tres("cpu=8,mem=16G,node=1,gres/gpu=8,gres/gpu:a100=8");
    expect(a.cpus == 8 && a.gpus == 8, "allocated: 8 CPUs, 8 GPUs");
    const auto t = flotilla::runs::parse_alloc_tres("cpu=4,gres/gpu:a100=2,gres/gpu:v100=1,gres/gpu=x");
    expect(t.cpus == 4 && t.gpus == 3, "typed GPUs summed, a malformed count skipped");
    expect(flotilla::runs::parse_alloc_tres("").cpus == 0, "no TRES: nothing allocated");
  }
  if (failures) return 1;
  std::printf("ok\n");
  return 0;
}
