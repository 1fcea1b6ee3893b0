// The worker command that exports a run's checkpoint: one builder for the app's Export dialog and
// `flotilla runs export-model`, so both front ends write the same folder for the same choice.
#pragma once

#include <string>
#include <vector>

namespace flotilla::runs {

struct ExportRequest {
  std::string checkpoint;  // the checkpoint folder on this machine
  std::string format;      // hf | safetensors | peft
  std::string out;         // the destination (absolute)
  std::string dtype;       // source | bf16 | fp32 ("": the worker's default, the source's)
  std::string tokenizer;   // a tokenizer folder copied into an hf export ("": none)
};

// The worker's arguments (after the program): `export --checkpoint ... --format ... --out ...`.
// GPT-2 safetensors go into the folder (a trailing '/' says it is one) and carry no dtype (the
// format keeps fp32); an hf export gets the tokenizer when it is a folder.
std::vector<std::string> export_worker_args(const ExportRequest& request);

}  // namespace flotilla::runs
