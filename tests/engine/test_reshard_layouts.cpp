// Resume on another layout (issue 32), the rest of the pairs (test_reshard.cpp has dp 4 -> 2 -> 1,
// tp 2 -> 1 -> 2 and ZeRO-1 -> 0; harness and tolerances: test_reshard_util.h): dp 1 -> 2 -> 4,
// ZeRO-0 <-> 1, ZeRO-2 <-> 0, ZeRO-1 -> 2, pp 2 -> 1 and 1 -> 2, the hybrid dp=2 x tp=2 ZeRO-1 ->
// tp=2 x pp=2 -> one process, and LoRA (adapters only: dp=2 ZeRO-1 -> tp=2 -> pp=2 -> one process)
// and QLoRA (NF4 base: dp=2 -> one process), each against one uninterrupted run on its first
// layout by losses, final parameters (adapters) and the rows of tokens read. Prints the table of
// docs/distributed.md "Resume on another layout".
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/interop/hf_model.h"
#include "engine/model/gpt.h"
#include "engine/model/model_shard.h"
#include "engine/model/param_layout.h"
#include "engine/parallel/rank_grid.h"
#include "tests/engine/test_reshard_util.h"

using namespace reshard_test;

namespace {

std::string golden(const std::string& name) {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/" + name;
}

// A bf16 Hugging Face folder of a random llama-family model wide enough for NF4 (blocks of 64).
std::string make_base(const std::string& root) {
  flotilla::ModelDims d;
  d.arch = flotilla::Arch::kLlama;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_kv_head = 2;
  d.head_dim = 32;
  d.n_embd = 128;
  d.ffn_dim = 256;
  d.vocab_size = 256;
  d.padded_vocab = flotilla::pad_vocab(256);
  d.max_seq_len = 64;
  d.norm_eps = 1e-5f;
  d.rope_theta = 10000;
  flotilla::Model m(d);
  m.init_random(17);
  std::vector<float> full(flotilla::ParamLayout(d).full_params());
  m.params_to_full(full.data());
  flotilla::interop::HfExportOptions o;
  o.dtype = "bf16";
  flotilla::interop::export_hf_folder(root + "/base", d, full.data(), o);
  return root + "/base";
}

// LoRA over `base` (the qwen3 golden: GQA, tied embedding): 4 sequences of 16 tokens per step.
std::string lora_config(int steps, const std::string& lora, const std::string& base) {
  return "[run]\nname = \"reshard-lora\"\nseed = 11\nthreads = 1\n"
         "[model]\ninit_from = \"" +
         base +
         "\"\n"
         "[lora]\nenabled = true\nrank = 4\nalpha = 8.0\ntargets = \"all-linear\"\n" +
         lora +
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = " +
         std::to_string(steps) +
         "\nmicro_batch = 1\nseq_len = 16\nglobal_batch_tokens = 64\n"
         "[optim]\nlr = 0.01\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 100\nkeep_last = 5\n[eval]\nevery = 0\nbatches = 1\n";
}

ChainResult reference(const std::string& root, const std::string& name, const std::string& cfg,
                      const Layout& l, int steps) {
  const ChainResult r = chain_run(root, name, cfg, {l}, {}, steps);
  CHECK_MSG(r.run.code == 0 && static_cast<int>(r.run.losses.size()) == steps, "%s: %s", name.c_str(),
            r.run.output.c_str());
  return r;
}

// gather_full_state, then every saved rank's part cut back out of it (its shard's runs, and under
// ZeRO its piece of ceil(n / dp) floats of the moments), compared with its rank file bit for bit.
bool recut_round_trip(const std::string& dir) {
  flotilla::CheckpointStore store(std::filesystem::path(dir).parent_path().string());
  const flotilla::LoadedCheckpoint rank0 = store.load_dir(dir, 0);
  const flotilla::ModelCheckpoint model = flotilla::load_model_checkpoint(dir, nullptr);
  const flotilla::ParamLayout table(model.dims);
  const flotilla::SavedLayout l = flotilla::saved_layout(rank0.trainer_state_json);
  flotilla::FullState full;
  flotilla::gather_full_state(rank0, model.dims, table, l, true, full);
  const flotilla::parallel::RankGrid grid(l.world, l.dp, l.tp, l.pp);
  bool ok = full.params == model.params;
  for (int rank = 0; rank < l.world; ++rank) {
    const flotilla::parallel::RankCoord c = grid.coord(rank);
    const flotilla::ModelShard shard = flotilla::make_shard(model.dims, l.tp, c.tp, l.pp, c.pp);
    size_t n = 0;
    for (size_t k : flotilla::local_param_sizes(table, shard)) n += k;
    std::vector<float> p(n), m(n), v(n);
    flotilla::full_to_shard(table, shard, full.params.data(), p.data());
    flotilla::full_to_shard(table, shard, full.m.data(), m.data());
    flotilla::full_to_shard(table, shard, full.v.data(), v.data());
    const size_t chunk = l.zero > 0 ? (n + static_cast<size_t>(l.dp) - 1) / static_cast<size_t>(l.dp) : n;
    const size_t begin = l.zero > 0 ? chunk * static_cast<size_t>(c.dp) : 0;
    m.resize(begin + chunk, 0.0f);  // the last piece is padded with zeros
    v.resize(begin + chunk, 0.0f);
    for (const auto& t : store.load_dir(dir, rank).tensors) {
      const auto* f = reinterpret_cast<const float*>(t.data.data());
      const size_t count = t.data.size() / 4;
      const float* want = t.name == "params"   ? p.data()
                          : t.name == "adam_m" ? m.data() + begin
                                               : v.data() + begin;
      ok = ok && count == (t.name == "params" ? n : chunk) && std::memcmp(f, want, t.data.size()) == 0;
    }
  }
  return ok;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("reshard-layouts");
  constexpr int kSteps = 6;
  const std::string cfg = base_config(kSteps);

  const ChainResult dp1 = reference(root, "dp1", cfg, layout(1), kSteps);
  expect_chain(root, "dp1-dp2-dp4", dp1, cfg, {layout(1), layout(2), layout(4)}, {2, 4}, kSteps);
  expect_chain(root, "pp1-pp2", dp1, cfg, {layout(1), layout(1, 1, 2)}, {3}, kSteps);

  const ChainResult dp2 = reference(root, "dp2", cfg, layout(2), kSteps);
  const Compared z0z1 = expect_chain(root, "z0-z1", dp2, cfg, {layout(2), layout(2, 1, 1, 1)}, {3}, kSteps);
  const Compared z0z2 = expect_chain(root, "z0-z2", dp2, cfg, {layout(2), layout(2, 1, 1, 2)}, {3}, kSteps);
  const ChainResult z2 = reference(root, "dp2z2", cfg, layout(2, 1, 1, 2), kSteps);
  const Compared z2z0 = expect_chain(root, "z2-z0", z2, cfg, {layout(2, 1, 1, 2), layout(2)}, {3}, kSteps);
  const ChainResult z1 = reference(root, "dp2z1", cfg, layout(2, 1, 1, 1), kSteps);
  const Compared z1z2 =
      expect_chain(root, "z1-z2", z1, cfg, {layout(2, 1, 1, 1), layout(2, 1, 1, 2)}, {3}, kSteps);
  // Two ranks without accumulation differences: ZeRO-0's all-reduce and ZeRO-1's reduce-scatter +
  // all-gather add the same two terms (docs/distributed.md, Gloo backend), so a switch between them
  // is bitwise. ZeRO-2 adds the micro-steps' reduced gradients in another order, so it is not.
  CHECK_MSG(z0z1.bitwise, "dp=2 ZeRO-0 -> ZeRO-1 should be bitwise");
  CHECK(!z0z2.bitwise && !z2z0.bitwise && !z1z2.bitwise);  // what the table says
  expect_chain(root, "dp4z1-dp2z2", reference(root, "dp4z1", cfg, layout(4, 1, 1, 1), kSteps), cfg,
               {layout(4, 1, 1, 1), layout(2, 1, 1, 2)}, {3}, kSteps);

  const ChainResult pp2 = reference(root, "pp2", cfg, layout(1, 1, 2), kSteps);
  expect_chain(root, "pp2-pp1", pp2, cfg, {layout(1, 1, 2), layout(1)}, {3}, kSteps);

  const ChainResult hybrid = reference(root, "dp2tp2z1", cfg, layout(2, 2, 1, 1), kSteps);
  expect_chain(root, "hybrid", hybrid, cfg, {layout(2, 2, 1, 1), layout(1, 2, 2), layout(1)}, {2, 4}, kSteps);

  // The gather is exact: cutting the gathered state back into the saved layout gives every rank
  // file's sections bit for bit (tp=2 x pp=2 at step 4; dp=2 x tp=2 ZeRO-1, moments in pieces).
  for (const std::string& dir :
       {root + "/hybrid/checkpoints/step-00000004", root + "/dp2tp2z1/checkpoints/step-00000006"})
    CHECK_MSG(recut_round_trip(dir), "%s: the gathered state does not cut back into its rank files",
              dir.c_str());

  // export and sample read any layout's checkpoint: the tp=2 x pp=2 one the hybrid chain wrote at
  // step 4, dp=2 x tp=2 ZeRO-1's and dp=2 ZeRO-2's (params in the first replicas' files, moments
  // split over the replicas). Greedy samples of the final checkpoints of a reference run and of its
  // re-cut chain (parameters within 1e-6) give the same tokens.
  {
    const auto sample = [&](const std::string& dir) {
      const auto s = flotilla_test::run_worker(
          {"sample", "--checkpoint", dir, "--prompt-ids", "1 2 3", "--tokens", "6", "--top-k", "1"},
          worker_env());
      CHECK_MSG(s.exit_code == 0, "sample from %s: %s", dir.c_str(), s.output.c_str());
      return s.output.substr(0, s.output.find('\n'));  // the token ids (then a line naming the folder)
    };
    sample(root + "/hybrid/checkpoints/step-00000004");
    CHECK(sample(root + "/dp2tp2z1") == sample(root + "/hybrid"));
    CHECK(sample(root + "/dp2z2") == sample(root + "/z2-z0"));
    for (const std::string& dir :
         {root + "/hybrid/checkpoints/step-00000004", root + "/dp2z2", root + "/dp2tp2z1"}) {
      const std::string out = dir + ".llmc.bin";
      const auto e = flotilla_test::run_worker(
          {"export", "--checkpoint", dir, "--format", "llmc", "--out", out}, worker_env());
      CHECK_MSG(e.exit_code == 0 && std::filesystem::file_size(out) > 0, "export from %s: %s", dir.c_str(),
                e.output.c_str());
    }
  }

  // A llama-family model (untied head, GQA) trained in full: tp=2 -> dp=2 ZeRO-1 -> one process.
  {
    std::string llama = base_config(kSteps);
    const size_t a = llama.find("[model]\n"), b = llama.find("[data]\n");
    llama.replace(a, b - a, "[model]\ninit_from = \"" + golden("llama") + "\"\n");
    llama.replace(llama.find("seq_len = 32"), 12, "seq_len = 16");
    llama.replace(llama.find("global_batch_tokens = 128"), 25, "global_batch_tokens = 64");
    const ChainResult ref = reference(root, "llama-tp2", llama, layout(1, 2), kSteps);
    expect_chain(root, "llama-chain", ref, llama, {layout(1, 2), layout(2, 1, 1, 1), layout(1)}, {2, 4},
                 kSteps);
  }

  // LoRA: only the adapters (and their moments) are in the checkpoint and re-cut.
  const std::string lora = lora_config(kSteps, "", golden("qwen3"));
  const ChainResult lora_ref = reference(root, "lora-dp2z1", lora, layout(2, 1, 1, 1), kSteps);
  expect_chain(root, "lora-chain", lora_ref, lora,
               {layout(2, 1, 1, 1), layout(1, 2), layout(1, 1, 2), layout(1)}, {2, 3, 4}, kSteps);
  // QLoRA: the base is quantised to NF4 on every layout the same way; the adapters move.
  const std::string qlora = lora_config(kSteps, "base_quant = \"nf4\"\n", make_base(root));
  const ChainResult qlora_ref = reference(root, "qlora-dp2", qlora, layout(2), kSteps);
  expect_chain(root, "qlora-chain", qlora_ref, qlora, {layout(2), layout(1)}, {3}, kSteps);
  return summary("reshard_layouts");
}
