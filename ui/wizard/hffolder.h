// What a Hugging Face model folder holds, for the wizard's Model page: the [model] keys its
// config.json sets (by the engine's own apply_hf_init_from, exactly as the worker's train and plan
// read it), the architecture it names and its weight files (safetensors headers only). A model
// named "org/name[@revision]" (issue 40) is read from its snapshot in the Hugging Face cache, with
// no network access, and keeps its name as model.init_from (the engine pins the commit at launch).
//
// Decision: one plain function, run on a worker thread by the page (a sharded checkpoint's headers
// can take a moment on a network disk); it never throws, and every failure carries the engine's
// message unchanged so the page can show it after "model.init_from: ".
#pragma once

#include <QList>
#include <QPair>
#include <QString>

#include "engine/config/run_config.h"

namespace flotilla::ui {

struct HfFolderInfo {
  QString folder;    // as read (absolute), or the model's name as given
  QString snapshot;  // a name's snapshot folder in the cache ("" for a folder)
  QString commit;    // that snapshot's commit ("" for a folder)
  bool ok = false;
  QString error;                 // the engine's message when !ok
  flotilla::ModelSection model;  // every shape key from config.json; init_from = folder
  QString architecture;          // config.json's architectures[0], e.g. "Qwen2ForCausalLM"
  QString modelType;             // its model_type, e.g. "qwen2"
  QString weights;               // HfCheckpoint::describe() without the folder: files, tensors, bytes
  bool hasTokenizer = false;     // a tokenizer.json (or GPT-2 vocab.json) sits in the folder
};

// Reads FOLDER/config.json and the safetensors headers (of a name: its cached snapshot's; a name
// the cache lacks is an error that says so). Never throws.
HfFolderInfo readHfFolder(const QString& folder);

// The folder model.init_from stands for on this machine: a name's cached snapshot (cache only, no
// network; "" when the cache lacks it), else `initFrom` itself.
std::string modelFolderOf(const std::string& initFrom);

// Whether model.init_from names a folder (not a .safetensors or llm.c .bin weights file), the
// rule validate() uses.
bool initFromIsFolder(const std::string& initFrom);

// The read-only summary the Model page shows for a folder that was read: (heading, text) rows
// (Architecture, Shape, Vocabulary, RoPE, Weights, Tokenizer).
QList<QPair<QString, QString>> describeHfFolder(const HfFolderInfo& info);

}  // namespace flotilla::ui
