// Slurm output parsers (remote/slurm_parse.h, remote/slurm_cluster.h) on output captured from the
// real Slurm 22.05 of the test fixture (tests/remote/data/slurm/, scripts/slurm-cluster; paths
// rewritten to /var/flotest), plus hostile and odd output: banners around the fence, a fence that
// never opens, torn lines, foreign gres, duration formats, values with spaces.
#include <string>

#include "check.h"
#include "remote/slurm_cluster.h"
#include "remote/slurm_parse.h"
#include "worker_run.h"

using namespace flotilla::remote;

namespace {

std::string data(const std::string& name) {
  return flotilla_test::read_file(std::string(FLOTILLA_SOURCE_DIR) + "/tests/remote/data/slurm/" + name);
}

void test_probe_capture() {
  const std::string raw = data("probe-fixture.txt");
  CHECK(!raw.empty());
  // A login banner and a `module` chatter before the fence, junk after: same result.
  const std::string noisy = "Welcome to HPC!\n@@section nodes\nevil|down|1|1|(null)|cpu\n@@rc 0\n" + raw +
                            "logout\n@@section nodes\nevil2|down|1|1|(null)|cpu\n";
  for (const std::string& text : {raw, noisy}) {
    const ClusterProbe p = parse_cluster_probe(text);
    CHECK_MSG(p.config.version == "22.05.8", "version '%s'", p.config.version.c_str());
    CHECK(p.config.cluster_name == "flotest");
    CHECK(!p.config.accounting);
    CHECK(p.config.requeue);
    CHECK(p.config.preempt_type == "preempt/none");
    CHECK(p.config.preempt_mode == "OFF");
    CHECK(p.config.min_job_age_s == 300);
    CHECK(p.config.values.at("SelectType") == "select/cons_tres");
    CHECK_MSG(p.nodes.size() == 2, "%zu nodes", p.nodes.size());
    if (p.nodes.size() == 2) {
      CHECK(p.nodes[0].name == "n1" && p.nodes[0].state == "idle" && p.nodes[0].cpus == 2);
      CHECK(p.nodes[0].memory_mb == 1000 && p.nodes[0].gpus == 0);
      CHECK(p.nodes[0].partitions.size() == 2 && p.nodes[0].partitions[0] == "cpu" &&
            p.nodes[0].partitions[1] == "short");
    }
    CHECK(p.partitions.size() == 2);
    if (p.partitions.size() == 2) {
      CHECK(p.partitions[0].name == "cpu" && p.partitions[0].is_default && p.partitions[0].state == "UP");
      CHECK(p.partitions[0].max_time == "02:00:00" && p.partitions[0].default_time == "00:30:00");
      CHECK(p.partitions[0].total_cpus == 4 && p.partitions[0].total_nodes == 2 &&
            p.partitions[0].nodes == "n[1-2]");
      CHECK(p.partitions[1].name == "short" && !p.partitions[1].is_default &&
            p.partitions[1].max_nodes == "1");
    }
    CHECK(p.squeue_json);
    CHECK(!p.sacct);
    CHECK_MSG(p.sacct_note.find("accounting storage is disabled") != std::string::npos, "note '%s'",
              p.sacct_note.c_str());
  }
  // The fence never opened (the login shell failed): nothing is guessed from the text.
  const ClusterProbe none = parse_cluster_probe(
      "@@section config\nSLURM_VERSION = 9\n@@section nodes\nn1|idle|2|1000|(null)|cpu\n");
  CHECK(none.config.version.empty() && none.nodes.empty() && none.partitions.empty() && !none.squeue_json);
}

void test_sections() {
  auto s = split_probe_sections(
      "x\n@@flotilla-slurm-begin@@\r\n@@section a\r\nline1\r\n@@rc 3\n@@section b\nno rc\n");
  CHECK(s["a"].text == "line1\n" && s["a"].rc == 3);
  CHECK(s["b"].text == "no rc\n" && s["b"].rc == -1);  // torn: the end marker and rc never came
  CHECK(split_probe_sections("no fence").empty());
}

void test_nodes_and_gres() {
  const auto drained = parse_sinfo_nodes(data("sinfo-drain.txt"));
  CHECK(drained.size() == 2);
  if (drained.size() == 2) CHECK(drained[0].state == "allocated" && drained[1].state == "drained");
  const auto odd = parse_sinfo_nodes(
      "g1|mixed|64|512000|gpu:a100:4(S:0-1),gpu:v100:2|gpu*\n"
      "g2|down*|64|512000|gpu:8,nic:2|gpu\n"
      "g3|idle~|8|x|gres/gpu|gpu\n"
      "broken line\n"
      "g4|idle|8|1000|(null)\n"      // a field short
      "g5|idle|8|1000|(null)|a|b\n"  // a field too many
      "g6|idle|99999999999999999999|1|(null)|p\n");
  CHECK_MSG(odd.size() == 4, "%zu nodes", odd.size());
  if (odd.size() == 4) {
    CHECK(odd[0].gpus == 6 && odd[0].gpu_type == "a100" && odd[0].partitions[0] == "gpu");
    CHECK(odd[1].state == "down" && odd[1].gpus == 8 && odd[1].gpu_type.empty());
    CHECK(odd[2].state == "idle" && odd[2].memory_mb == 0 && odd[2].gpus == 0);
    CHECK(odd[3].cpus == 0);  // out of range: not guessed
  }
  CHECK(gres_gpu_count("gpu:h100:8(IDX:0-7)") == 8);
  CHECK(gres_gpu_count("gpu:a:1(IDX:0,2),gpu:b:2") == 3);
  CHECK(gres_gpu_count("gpu:99999") == 0);
}

void test_records() {
  const auto n = parse_scontrol_record(data("node-n1.txt"));
  CHECK(n.at("NodeName") == "n1");
  CHECK(n.at("NodeAddr") == "127.0.0.1");
  CHECK_MSG(n.at("OS").rfind("Linux ", 0) == 0 && n.at("OS").find(' ') != std::string::npos, "OS '%s'",
            n.at("OS").c_str());
  CHECK(n.at("RealMemory") == "1000");
  const auto j = parse_scontrol_record(data("job-cancelled.txt"));
  CHECK(j.at("JobState") == "CANCELLED" && j.at("ExitCode") == "0:15" && j.at("Restarts") == "0");
  CHECK(j.at("TRES") == "cpu=2,node=1,billing=2");
  CHECK(j.at("AllocNode:Sid") == "localhost:31445");
  const auto p = parse_partitions(
      "PartitionName=gpu State=UP TRES=cpu=64,mem=500G,node=2,billing=64,gres/gpu=16\n"
      "NoPartition=1\n");
  CHECK(p.size() == 1 && p[0].total_gpus == 16);
}

void test_durations() {
  CHECK(parse_slurm_duration("0:03") == 3);
  CHECK(parse_slurm_duration("1:57") == 117);
  CHECK(parse_slurm_duration("2:00:00") == 7200);
  CHECK(parse_slurm_duration("1-02:03:04") == 93784);
  CHECK(parse_slurm_duration("3-00") == 3 * 86400);
  CHECK(parse_slurm_duration("10") == 600);
  CHECK(parse_slurm_duration("UNLIMITED") == -1);
  CHECK(parse_slurm_duration("INFINITE") == -1);
  CHECK(!parse_slurm_duration("INVALID"));
  CHECK(!parse_slurm_duration("N/A"));
  CHECK(!parse_slurm_duration(""));
  CHECK(!parse_slurm_duration("1:2:3:4"));
  CHECK(!parse_slurm_duration("-5"));
}

void test_squeue() {
  const auto jobs =
      parse_squeue(data("squeue-mixed.txt") + "garbage|x\n12_3|PENDING|None|0:00|1:00|N/A|1|(None)\n");
  CHECK_MSG(jobs.size() == 4, "%zu jobs", jobs.size());
  if (jobs.size() == 4) {
    CHECK(jobs[0].job_id == "5" && jobs[0].state == "PENDING" && jobs[0].reason == "Resources");
    CHECK(jobs[1].reason == "JobHeldUser" && jobs[1].nodes == 2);
    CHECK(jobs[2].state == "RUNNING" && jobs[2].elapsed_s == 3 && jobs[2].time_left_s == 117 &&
          jobs[2].nodelist == "n1");
    CHECK(jobs[3].job_id == "12_3");  // an array task
  }
  // The queue order of pending jobs: ours (9) behind 5 and 7 of its partition; 6 waits elsewhere.
  const std::string order = "5|cpu\n6|gpu\n7|cpu\nbanner line\n9|cpu\n11|cpu\n";
  const auto place = parse_queue_place(order, "9");
  CHECK(place && place->ahead == 2 && place->partition == "cpu");
  CHECK(place && queue_place_text(*place) == "2 jobs ahead in partition cpu");
  const auto first = parse_queue_place(order, "6");
  CHECK(first && first->ahead == 0 && queue_place_text(*first) == "next in partition gpu's queue");
  CHECK(!parse_queue_place(order, "10"));  // not pending (any more)
  CHECK(!parse_queue_place("", "9"));
  CHECK(plain_reason("Resources") == "waiting for free nodes");
  CHECK(plain_reason("JobHeldUser").find("held") != std::string::npos);
  CHECK(plain_reason("SomethingNew") == "SomethingNew");
  CHECK_MSG(plain_reason("ReqNodeNotAvail, UnavailableNodes:n[1-2]") ==
                "a requested node is not available (down, drained or reserved) (UnavailableNodes:n[1-2])",
            "%s", plain_reason("ReqNodeNotAvail, UnavailableNodes:n[1-2]").c_str());
}

void test_markers_and_sacct() {
  auto m = parse_exit_marker(
      "exit=10 restarts=0 time=100 reason=time-limit\nexit=0 restarts=1 time=200 reason=none\n");
  CHECK(m && m->exit_code == 0 && m->restarts == 1 && m->time == 200);
  m = parse_exit_marker("exit=10 restarts=0 time=100\nexit=");  // torn last line: the previous one holds
  CHECK(m && m->exit_code == 10);
  CHECK(!parse_exit_marker(""));
  CHECK(!parse_exit_marker("exit=abc\n"));
  const auto s = parse_sacct(
      "17|COMPLETED|0:0|00:01:05|billing=4,cpu=4,node=2\n"
      "18|CANCELLED by 0|0:15|00:00:09|cpu=2,gres/gpu=8,node=1\n",
      "18");
  CHECK(s && s->state == "CANCELLED" && s->exit_code == 0 && s->elapsed_s == 9 &&
        s->alloc_tres == "cpu=2,gres/gpu=8,node=1");
  CHECK(!parse_sacct("Slurm accounting storage is disabled\n", "18"));
}

// `srun --overlap --label` output as Slurm 22.05 prints it for a 2-node job (labels padded to the
// widest task number when there are 10 or more tasks), srun's own unlabelled messages among it.
void test_job_gpus() {
  const auto nodes = parse_job_gpus(
      "srun: warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"
      " 1: @@node n2\n"
      " 0: @@node n1\n"
      " 0: 0, NVIDIA H100 80GB HBM3, 81559, 2048, 37, 41, 120.5, 550.54\n"
      " 1: flotilla:no-nvidia-smi\n"
      " 0: 1, NVIDIA H100 80GB HBM3, 81559, 1024, [N/A], 40, [N/A], 550.54\n"
      "10: 0, stray row of a task without its node line, 1, 1, 1, 1, 1, 1\n"
      "srun: error: n3: task 2: Exited with exit code 1\n");
  CHECK_MSG(nodes.size() == 2, "%zu nodes", nodes.size());
  if (nodes.size() != 2) return;
  CHECK(nodes[0].node == "n1" && nodes[0].nvidia_smi && nodes[0].gpus.size() == 2);
  if (nodes[0].gpus.size() == 2) {
    CHECK(nodes[0].gpus[0].index == 0 && nodes[0].gpus[0].utilization_pct == 37 &&
          nodes[0].gpus[0].memory_used_bytes == (uint64_t{2048} << 20));
    CHECK(nodes[0].gpus[1].index == 1 && nodes[0].gpus[1].utilization_pct < 0 && nodes[0].gpus[1].power_w < 0);
  }
  CHECK(nodes[1].node == "n2" && !nodes[1].nvidia_smi && nodes[1].gpus.empty());
  CHECK(parse_job_gpus("").empty());
  CHECK(parse_job_gpus("srun: error: Unable to create step for job 7: Job/step already completing\n").empty());
}

}  // namespace

int main() {
  test_probe_capture();
  test_sections();
  test_nodes_and_gres();
  test_records();
  test_durations();
  test_squeue();
  test_markers_and_sacct();
  test_job_gpus();
  return flotilla_test::summary("test_slurm_parse");
}
