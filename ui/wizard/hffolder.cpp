// Hugging Face folder summary (see hffolder.h).
#include "ui/wizard/hffolder.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QLocale>

#include <exception>

#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/hub.h"

namespace flotilla::ui {
namespace {

QString tr(const char* text) { return QCoreApplication::translate("HfFolder", text); }

QString number(double v) { return QLocale().toString(v, 'g', 10); }

}  // namespace

bool initFromIsFolder(const std::string& initFrom) {
  const auto endsWith = [&](const std::string& s) {
    return initFrom.size() >= s.size() && initFrom.compare(initFrom.size() - s.size(), s.size(), s) == 0;
  };
  return !initFrom.empty() && !endsWith(".safetensors") && !endsWith(".bin");
}

std::string modelFolderOf(const std::string& initFrom) {
  namespace hub = flotilla::interop::hub;
  if (!hub::is_model_ref(initFrom)) return initFrom;
  try {
    const auto snapshot = hub::find_cached(hub::parse_model_ref(initFrom, "model.init_from"),
                                           hub::FileSet::kTraining, hub::cache_dir().path);
    return snapshot ? snapshot->folder : std::string();
  } catch (const std::exception&) {
    return std::string();
  }
}

HfFolderInfo readHfFolder(const QString& folder) {
  namespace hub = flotilla::interop::hub;
  HfFolderInfo info;
  info.folder = folder;
  try {
    flotilla::RunConfig config;
    config.model.init_from = folder.toStdString();
    const bool named = hub::is_model_ref(config.model.init_from);
    if (named) {
      // The cached snapshot, read as a folder; the name stays model.init_from.
      const hub::ModelRef ref = hub::parse_model_ref(config.model.init_from, "model.init_from");
      const hub::CacheDir cache = hub::cache_dir();
      const auto snapshot = hub::find_cached(ref, hub::FileSet::kTraining, cache.path);
      if (!snapshot)
        throw std::runtime_error(ref.text() + " is not in the Hugging Face cache (" + cache.path +
                                 ", set by " + cache.source +
                                 ") with its config.json and safetensors weights: Download fetches it");
      info.snapshot = QString::fromStdString(snapshot->folder);
      info.commit = QString::fromStdString(snapshot->commit);
      config.model.init_from = snapshot->folder;
    }
    if (!flotilla::interop::apply_hf_init_from(config))
      throw std::runtime_error("\"" + config.model.init_from + "\" is not a folder with a config.json");
    const flotilla::interop::HfConfig hf = flotilla::interop::read_hf_config(config.model.init_from);
    const flotilla::interop::HfCheckpoint weights(config.model.init_from);
    info.model = config.model;
    if (named) info.model.init_from = folder.toStdString();
    info.architecture = QString::fromStdString(hf.architecture);
    info.modelType = QString::fromStdString(hf.model_type);
    QString described = QString::fromStdString(weights.describe());
    const QString prefix = QString::fromStdString(weights.folder()) + QStringLiteral(": ");
    if (described.startsWith(prefix)) described = described.mid(prefix.size());
    info.weights = described;
    const QDir dir(named ? info.snapshot : folder);
    info.hasTokenizer = QFileInfo::exists(dir.filePath(QStringLiteral("tokenizer.json"))) ||
                        QFileInfo::exists(dir.filePath(QStringLiteral("vocab.json")));
    info.ok = true;
  } catch (const std::exception& e) {
    info.error = QString::fromUtf8(e.what());
  }
  return info;
}

QList<QPair<QString, QString>> describeHfFolder(const HfFolderInfo& info) {
  const flotilla::ModelSection& m = info.model;
  const QLocale locale;
  QList<QPair<QString, QString>> rows;
  rows.append(
      {tr("Architecture"),
       tr("%1 (model_type %2), trained as model.arch = llama").arg(info.architecture, info.modelType)});
  QString shape = tr("%1 layers, %2 heads, %3 K/V heads, head_dim %4, width %5, FFN %6")
                      .arg(m.n_layer)
                      .arg(m.n_head)
                      .arg(m.n_kv_head > 0 ? m.n_kv_head : m.n_head)
                      .arg(m.head_dim > 0 ? m.head_dim : (m.n_head > 0 ? m.n_embd / m.n_head : 0))
                      .arg(m.n_embd)
                      .arg(m.ffn_dim);
  if (m.qkv_bias) shape += tr(", q/k/v biases");
  if (m.qk_norm) shape += tr(", q/k RMSNorm");
  rows.append({tr("Shape"), shape});
  rows.append({tr("Vocabulary"), tr("%1 tokens, context %2, %3")
                                     .arg(locale.toString(m.vocab_size), locale.toString(m.max_seq_len),
                                          m.tie_embeddings ? tr("LM head tied to the embedding")
                                                           : tr("separate (untied) LM head"))});
  QString rope = tr("%1, theta %2").arg(QString::fromStdString(m.rope_scaling), number(m.rope_theta));
  if (m.rope_scaling == "llama3")
    rope += tr(" (factor %1, low/high frequency factors %2/%3, original context %4)")
                .arg(number(m.rope_factor), number(m.rope_low_freq_factor), number(m.rope_high_freq_factor))
                .arg(locale.toString(m.rope_original_max_position));
  else if (m.rope_scaling == "linear")
    rope += tr(" (factor %1)").arg(number(m.rope_factor));
  rows.append({tr("RoPE"), rope + tr("; RMSNorm eps %1").arg(number(m.norm_eps))});
  rows.append({tr("Weights"), info.weights});
  rows.append({tr("Tokenizer"), info.hasTokenizer ? tr("in the folder (the Data page uses it)")
                                                  : tr("none in the folder (choose one on the Data page)")});
  return rows;
}

}  // namespace flotilla::ui
