// Helpers for the New Run wizard tests that drive pages by their widgets' objectNames: machine
// descriptions, child lookup, the shown problems, and copying golden folders into a temporary one.
#pragma once

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QWizardPage>

#include <filesystem>

#include "engine/core/probe.h"

namespace wizard_helpers {

inline flotilla::ProbeResult cpuMachine() {
  flotilla::ProbeResult p;
  p.cpu_model = "Test CPU";
  p.physical_cores = 8;
  p.logical_cpus = 16;
  p.memory_total_bytes = 32ull << 30;
  return p;
}

inline flotilla::ProbeResult gpuMachine(int gpus, const char* name, quint64 memBytes) {
  flotilla::ProbeResult p = cpuMachine();
  for (int i = 0; i < gpus; ++i) {
    flotilla::GpuInfo g;
    g.index = i;
    g.name = name;
    g.memory_total_bytes = memBytes;
    p.gpus.push_back(g);
  }
  return p;
}

template <typename T>
T* child(QWidget* page, const char* name) {
  T* w = page->findChild<T*>(QLatin1String(name));
  if (!w) qFatal("no child %s", name);
  return w;
}

// Every problem the page shows now: beside its fields (fieldProblem-*) and in its list ("problems").
inline QString shownProblems(QWizardPage* page) {
  QStringList out;
  for (QLabel* l : page->findChildren<QLabel*>())
    if ((l->objectName() == QLatin1String("problems") ||
         l->objectName().startsWith(QLatin1String("fieldProblem-"))) &&
        !l->isHidden() && !l->text().isEmpty())
      out << l->text();
  return out.join(QLatin1Char('\n'));
}

// Copies the named files of `from` into a new folder `to`; false when one does not copy.
inline bool copyFiles(const QString& from, const QString& to, const QStringList& names) {
  if (!QDir().mkpath(to)) return false;
  for (const QString& n : names)
    if (!QFile::copy(QDir(from).filePath(n), QDir(to).filePath(n))) return false;
  return true;
}

inline bool writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
  return f.write(bytes) == bytes.size();
}

// A Hugging Face Llama folder of any size that takes no disk: config.json and a model.safetensors
// whose header lists every tensor in BF16 with the data left as a hole in a sparse file (the wizard
// and the planner read headers only; training it would read zeros).
inline bool writeSparseLlamaFolder(const QString& dir, int layers, int width, int ffn, int heads, int kvHeads,
                                   int vocab, bool tied) {
  if (!QDir().mkpath(dir)) return false;
  const QJsonObject config{{QStringLiteral("architectures"), QJsonArray{QStringLiteral("LlamaForCausalLM")}},
                           {QStringLiteral("model_type"), QStringLiteral("llama")},
                           {QStringLiteral("hidden_size"), width},
                           {QStringLiteral("intermediate_size"), ffn},
                           {QStringLiteral("num_hidden_layers"), layers},
                           {QStringLiteral("num_attention_heads"), heads},
                           {QStringLiteral("num_key_value_heads"), kvHeads},
                           {QStringLiteral("hidden_act"), QStringLiteral("silu")},
                           {QStringLiteral("max_position_embeddings"), 8192},
                           {QStringLiteral("rms_norm_eps"), 1e-5},
                           {QStringLiteral("rope_theta"), 500000.0},
                           {QStringLiteral("tie_word_embeddings"), tied},
                           {QStringLiteral("attention_bias"), false},
                           {QStringLiteral("vocab_size"), vocab},
                           {QStringLiteral("torch_dtype"), QStringLiteral("bfloat16")}};
  QFile cfg(dir + QStringLiteral("/config.json"));
  if (!cfg.open(QIODevice::WriteOnly) || cfg.write(QJsonDocument(config).toJson()) <= 0) return false;
  cfg.close();
  const qint64 kv = qint64{width} / heads * kvHeads;
  QJsonObject header;
  qint64 offset = 0;
  const auto add = [&](const QString& name, qint64 rows, qint64 cols) {
    const QJsonArray shape = cols > 0 ? QJsonArray{rows, cols} : QJsonArray{rows};
    const qint64 bytes = 2 * rows * (cols > 0 ? cols : 1);
    header[name] = QJsonObject{{QStringLiteral("dtype"), QStringLiteral("BF16")},
                               {QStringLiteral("shape"), shape},
                               {QStringLiteral("data_offsets"), QJsonArray{offset, offset + bytes}}};
    offset += bytes;
  };
  add(QStringLiteral("model.embed_tokens.weight"), vocab, width);
  for (int l = 0; l < layers; ++l) {
    const QString p = QStringLiteral("model.layers.%1.").arg(l);
    add(p + QStringLiteral("input_layernorm.weight"), width, 0);
    add(p + QStringLiteral("self_attn.q_proj.weight"), width, width);
    add(p + QStringLiteral("self_attn.k_proj.weight"), kv, width);
    add(p + QStringLiteral("self_attn.v_proj.weight"), kv, width);
    add(p + QStringLiteral("self_attn.o_proj.weight"), width, width);
    add(p + QStringLiteral("post_attention_layernorm.weight"), width, 0);
    add(p + QStringLiteral("mlp.gate_proj.weight"), ffn, width);
    add(p + QStringLiteral("mlp.up_proj.weight"), ffn, width);
    add(p + QStringLiteral("mlp.down_proj.weight"), width, ffn);
  }
  add(QStringLiteral("model.norm.weight"), width, 0);
  if (!tied) add(QStringLiteral("lm_head.weight"), vocab, width);
  QByteArray json = QJsonDocument(header).toJson(QJsonDocument::Compact);
  while (json.size() % 8 != 0) json += ' ';
  QFile st(dir + QStringLiteral("/model.safetensors"));
  if (!st.open(QIODevice::WriteOnly)) return false;
  const quint64 n = static_cast<quint64>(json.size());
  QByteArray prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  if (st.write(prefix) != 8 || st.write(json) != json.size()) return false;
  return st.resize(8 + json.size() + offset);  // the tensor data: a hole
}

// Moves the files of `folder` into the Hugging Face cache `hub` as huggingface_hub lays a snapshot
// out: blobs/<etag>, snapshots/<commit>/<file> a relative link to ../../blobs/<etag>, refs/main
// holding the commit (issue 40). The etags are made up (nothing reading a cache checks them).
inline bool addToHfCache(const QString& hub, const QString& repo, const QString& commit,
                         const QString& folder) {
  const QString root =
      hub + QStringLiteral("/models--") + QString(repo).replace(QLatin1Char('/'), QStringLiteral("--"));
  const QString snap = root + QStringLiteral("/snapshots/") + commit;
  if (!QDir().mkpath(root + QStringLiteral("/blobs")) || !QDir().mkpath(snap) ||
      !QDir().mkpath(root + QStringLiteral("/refs")))
    return false;
  for (const QString& file : QDir(folder).entryList(QDir::Files)) {
    const QString etag = QString::fromLatin1(
        QCryptographicHash::hash((repo + file).toUtf8(), QCryptographicHash::Sha256).toHex());
    if (!QFile::rename(folder + QLatin1Char('/') + file, root + QStringLiteral("/blobs/") + etag))
      return false;
    std::error_code ec;
    std::filesystem::create_symlink(("../../blobs/" + etag).toStdString(),
                                    (snap + QLatin1Char('/') + file).toStdString(), ec);
    if (ec) return false;
  }
  return writeFile(root + QStringLiteral("/refs/main"), commit.toUtf8());
}

}  // namespace wizard_helpers
