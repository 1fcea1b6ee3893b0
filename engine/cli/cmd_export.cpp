// flotilla-worker export --checkpoint DIR --format safetensors|llmc --out PATH
//
// Decision: DIR may be one step-N directory, a checkpoints root or a run directory (its
// checkpoints/ is used); for a root, the newest checkpoint that verifies is exported and any damaged
// newer one is reported on stderr. The model's dimensions come from the resolved config that the
// trainer stores in trainer.json ("config" -> "model"), never from guesses about the tensor size
// (both through load_model_checkpoint, shared with `sample`).

#include <cstdio>
#include <filesystem>

#include "engine/checkpoint/durable_io.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/interop/bnb.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/llmc.h"
#include "engine/interop/peft.h"
#include "engine/model/gpt.h"
#include "flotilla/build_info.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int cmd_export(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker export --checkpoint DIR --format hf|peft|safetensors|llmc --out PATH\n"
        "                              [--dtype source|bf16|fp32] [--tokenizer DIR]\n\n"
        "Writes the model of a checkpoint for other tools:\n"
        "  peft         a LoRA run's adapter as a PEFT folder: adapter_config.json and\n"
        "               adapter_model.safetensors with PEFT's tensor names (--dtype fp32 by default,\n"
        "               or bf16); PeftModel.from_pretrained(base, PATH) loads it on the base model\n"
        "               (the run's model.init_from, named in adapter_config.json).\n"
        "  hf           a Hugging Face folder of a Llama-family model (model.arch = \"llama\"); for a\n"
        "               LoRA run the base with the adapter merged in (W + scale * B A), which\n"
        "               transformers loads without PEFT (a QLoRA run's base is dequantised from\n"
        "               its 4-bit NF4 quantisation first, the weights the adapter was trained over):\n"
        "               config.json, generation_config.json, safetensors in --dtype (by default the\n"
        "               source's: the dtype of the model.init_from folder, else fp32, the checkpoint's;\n"
        "               sharded above 5 GB, with model.safetensors.index.json; no lm_head when the\n"
        "               embedding is tied) and the tokenizer files of --tokenizer DIR (or a Hub name\n"
        "               org/name), or of the run's model.init_from folder or Hub name's snapshot.\n"
        "               AutoModelForCausalLM.from_pretrained(PATH) loads it. PATH is replaced as a\n"
        "               whole, only once the new folder is complete.\n"
        "  safetensors  Hugging Face GPT-2 names and layouts (as the `gpt2` model's model.safetensors),\n"
        "               fp32. If PATH is a directory (existing, or ending in '/'), writes\n"
        "               PATH/model.safetensors and PATH/config.json: a folder transformers loads with\n"
        "               GPT2LMHeadModel.from_pretrained(PATH).\n"
        "  llmc         llm.c model file, version 3 (fp32), loadable by llm.c's train_gpt2.c.\n"
        "DIR is a step-N checkpoint directory, a checkpoints directory or a run directory; for the\n"
        "latter two the newest checkpoint that verifies is used. Files are written crash-safely\n"
        "(temporary file, fsync, rename). docs/checkpoints.md describes both formats.\n");
    return 0;
  }
  const auto dir = args.value("--checkpoint");
  const std::string format = args.value_or("--format", "safetensors");
  auto out = args.value("--out");
  const auto dtype_flag = args.value("--dtype");
  const auto tokenizer = args.value("--tokenizer");
  args.finish("export");
  if (!dir) throw_usage("export needs --checkpoint DIR");
  if (!out) throw_usage("export needs --out PATH");
  if (format != "safetensors" && format != "llmc" && format != "hf" && format != "peft")
    throw_usage("--format " + format + " is not supported; use hf, peft, safetensors or llmc");
  if (dtype_flag && *dtype_flag != "bf16" && *dtype_flag != "fp32" && *dtype_flag != "source")
    throw_usage("--dtype " + *dtype_flag + " is not supported; use source, bf16 or fp32");

  std::vector<std::string> warnings;
  const ModelCheckpoint c = load_model_checkpoint(*dir, &warnings);
  // The dtype: as asked, else the source's (interop::source_dtype), said so in the message. A PEFT
  // adapter has no source dtype: its trained fp32 values are kept.
  std::string why;
  const std::string dtype = dtype_flag && *dtype_flag != "source" ? *dtype_flag
                            : format == "peft"                    ? "fp32"
                                                                  : interop::source_dtype(c.init_from, &why);
  const std::string dtype_text = dtype_flag && *dtype_flag != "source" ? dtype
                                 : format == "peft" ? dtype + ", the adapter's trained values"
                                                    : dtype + ", as the source: " + why;
  // Messages name the folder written, wherever the command ran from.
  std::error_code abs_ec;
  const std::string out_abs = fs::absolute(*out, abs_ec).string();
  if (!abs_ec) out = out_abs;
  const std::string source = fs::absolute(c.dir, abs_ec).string();
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const ModelDims& d = c.dims;
  if (format == "peft") {
    if (!c.lora.enabled())
      throw_usage(c.dir +
                  " is a full fine-tuning checkpoint (no [lora]); --format peft writes LoRA adapters: "
                  "use --format hf");
    interop::PeftExportOptions o;
    o.dtype = dtype;
    o.base_model_name_or_path = c.init_from;
    const std::vector<std::string> files = interop::export_peft_adapter(*out, d, c.lora, c.params.data(), o);
    std::printf("exported %s (step %lld) as a PEFT LoRA adapter (%s): %s\n", source.c_str(),
                static_cast<long long>(c.step), dtype_text.c_str(), out->c_str());
    for (const std::string& f : files) std::printf("  %s\n", f.c_str());
    std::printf("  r %d, alpha %g%s, targets %s, %zu parameters; base %s\n", c.lora.rank, c.lora.alpha,
                c.lora.rslora ? " (rsLoRA)" : "", lora_targets_text(c.lora.targets).c_str(), c.params.size(),
                c.init_from.c_str());
    if (c.lora.nf4) {  // PEFT's adapter_config.json has no key for the base's quantisation
      const bool saved_4bit = interop::is_bnb_4bit_folder(c.init_from);
      std::printf(
          "  QLoRA: trained over the base quantised to 4-bit NF4 (%s); the adapter is a plain LoRA "
          "adapter and adapter_config.json records no quantisation: ",
          c.lora.double_quant ? "double-quantised absmax" : "fp32 absmax");
      if (saved_4bit)
        std::printf(
            "the base folder was saved in 4-bit by bitsandbytes, so from_pretrained loads it as trained\n");
      else
        std::printf(
            "load the base in 4-bit (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", "
            "bnb_4bit_use_double_quant=%s)) for the model it was trained as\n",
            c.lora.double_quant ? "True" : "False");
    }
    return 0;
  }
  if (c.lora.enabled() && format != "hf")
    throw_usage(c.dir +
                " holds LoRA adapters: export them with --format peft, or the merged model with --format hf");
  // A LoRA checkpoint's model is its base with the adapters merged (interop/peft.h).
  const std::vector<float> merged = c.lora.enabled() ? interop::merged_model_params(c) : std::vector<float>{};
  const float* params = c.lora.enabled() ? merged.data() : c.params.data();

  std::string path = *out;
  std::vector<std::string> written;
  if (format == "hf" && !d.llama()) {  // GPT-2: the safetensors folder (config.json + model.safetensors)
    if (path.empty() || path.back() != '/') path += '/';
  } else if (format == "hf") {
    interop::HfExportOptions o;
    o.dtype = dtype;
    o.source_folder = interop::is_hf_folder(c.init_from) ? c.init_from : "";
    if (tokenizer) o.tokenizer_folder = *tokenizer;
    const std::vector<std::string> files = interop::export_hf_folder(path, d, params, o);
    uint64_t bytes = 0;
    for (const std::string& f : files) {
      std::error_code ec;
      bytes += fs::file_size(fs::path(path) / f, ec);
    }
    std::printf("exported %s (step %lld) as a Hugging Face folder (%s%s): %s (%s)\n", source.c_str(),
                static_cast<long long>(c.step), dtype_text.c_str(),
                c.lora.enabled() && !c.lora.nf4 ? ", the LoRA adapter merged into its base" : "",
                path.c_str(), mib(bytes).c_str());
    if (c.lora.nf4) std::printf("  %s\n", interop::merged_export_note(c.lora).c_str());
    for (const std::string& f : files) std::printf("  %s\n", f.c_str());
    if (o.source_folder.empty() && o.tokenizer_folder.empty())
      std::printf(
          "  (no tokenizer files: the run did not start from a Hugging Face folder; pass --tokenizer DIR)\n");
    std::printf("  model: %s, %zu parameters\n", describe_dims(d).c_str(), num_parameters_unpadded(d));
    return 0;
  }
  if (format == "llmc") {
    interop::export_llmc(path, d, params);
  } else {
    const bool folder = is_dir(path) || (!path.empty() && path.back() == '/');
    if (folder) {
      std::error_code ec;
      fs::create_directories(path, ec);
      if (ec) throw_io("cannot create " + path + ": " + ec.message());
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      const std::string cfg = interop::hf_gpt2_config_json(d);
      ckpt::replace_file_durably(path + "/config.json", cfg.size(),
                                 [&](ckpt::DurableWriter& w) { w.write(cfg.data(), cfg.size()); });
      written.push_back(path + "/config.json");
      path += "/model.safetensors";
    }
    interop::export_gpt2_safetensors(
        path, d, params,
        {{"flotilla_step", std::to_string(c.step)}, {"flotilla_version", FLOTILLA_VERSION_STRING}});
  }
  written.insert(written.begin(), path);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  std::printf("exported %s (step %lld) as %s: %s (%s)\n", source.c_str(), static_cast<long long>(c.step),
              format.c_str(), path.c_str(), mib(size).c_str());
  for (size_t i = 1; i < written.size(); ++i) std::printf("  also wrote %s\n", written[i].c_str());
  std::printf(
      "  model: n_layer %d, n_head %d, n_embd %d, vocab_size %d (padded %d), max_seq_len %d, %zu "
      "parameters\n",
      d.n_layer, d.n_head, d.n_embd, d.vocab_size, d.padded_vocab, d.max_seq_len, num_parameters_unpadded(d));
  return 0;
}

}  // namespace flotilla::cli
