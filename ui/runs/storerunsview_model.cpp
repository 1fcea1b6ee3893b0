// The stored runs view's actions on a run's model (see storerunsview.h): export its weights (a LoRA
// run's adapter as a PEFT folder, or its base with the adapter merged in) and sample from it, each by
// running flotilla-worker on the run's newest verified checkpoint.
#include "ui/runs/storerunsview.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QMessageBox>
#include <QProcess>

#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/sample_text.h"
#include "runs/service.h"
#include "ui/common/background.h"
#include "ui/runs/localruns.h"
#include "ui/runs/storeservice.h"

namespace flotilla::ui {
namespace {

// The run's config as stored (its TOML, else its folder's config.toml); nullopt for the demo and
// older runs, which keep none.
std::optional<flotilla::RunConfig> storedConfig(const db::Run& run) {
  try {
    return run.config_toml.empty() ? flotilla::load_config_file(run.run_dir + "/config.toml")
                                   : flotilla::parse_config_toml(run.config_toml, run.name);
  } catch (const flotilla::Error&) {
    return std::nullopt;
  }
}

}  // namespace

bool StoreRunsView::isLoraRun(qint64 id) {
  const std::optional<db::Run> run = m_store->run(id);
  if (!run) return false;
  const std::optional<flotilla::RunConfig> config = storedConfig(*run);
  return config && config->lora.enabled;
}

std::optional<StoreRunsView::ModelSource> StoreRunsView::modelSource(qint64 id) {
  const std::optional<db::Run> run = m_store->run(id);
  if (!run) return std::nullopt;
  ModelSource src;
  src.name = QString::fromStdString(run->name);
  src.runDir = QString::fromStdString(run->run_dir);
  src.id = id;
  // A folder elsewhere (a run on nodes or a cluster): its newest checkpoint is fetched first.
  src.elsewhere = src.runDir.isEmpty() || !QDir(src.runDir).exists();
  QString error;
  src.worker = m_runs->findWorker(&error);
  if (src.worker.isEmpty()) {
    emit errorRaised(tr("Cannot find flotilla-worker: %1").arg(error));
    return std::nullopt;
  }
  // The demo and older runs keep no config: a GPT-2 without a tokenizer.
  if (const std::optional<flotilla::RunConfig> config = storedConfig(*run)) {
    src.llama = config->model.arch == "llama";
    src.lora = config->lora.enabled;
    src.qlora = config->lora.enabled && config->lora.base_quant == "nf4";
    src.tokenizer = QString::fromStdString(runs::run_tokenizer_path(*config));
    if (!src.tokenizer.isEmpty() && !QFileInfo::exists(src.tokenizer)) src.tokenizer.clear();  // not here
  }
  return src;
}

void StoreRunsView::withCheckpoint(const ModelSource& src, std::function<void(const QString& dir)> then) {
  if (!src.elsewhere) {
    then(src.runDir);
    return;
  }
  const runs::ServiceOptions options = m_runs->serviceOptions();
  beginBusy(tr("Fetching the newest checkpoint of %1…").arg(src.name));
  runInBackground(
      this,
      [options, id = src.id]() -> std::pair<QString, QString> {
        try {
          return {QString::fromStdString(runs::RunService(options).fetch_checkpoint(id, std::nullopt)), QString()};
        } catch (const std::exception& e) {
          return {QString(), QString::fromUtf8(e.what())};
        }
      },
      [this, then, name = src.name](const std::pair<QString, QString>& fetched) {
        endBusy();
        if (fetched.first.isEmpty()) {
          emit errorRaised(tr("Cannot fetch a checkpoint of %1: %2").arg(name, fetched.second));
          return;
        }
        then(fetched.first);
      });
}

void StoreRunsView::runWorker(const QString& worker, const QStringList& args, const QString& busyText,
                              std::function<void(bool, const QString&, const QString&)> done) {
  auto* process = new QProcess(this);
  process->setProgram(worker);
  process->setArguments(args);  // no shell: nothing the user typed is interpreted
  beginBusy(busyText);
  connect(process, &QProcess::finished, this, [this, process, done](int code, QProcess::ExitStatus status) {
    endBusy();
    process->deleteLater();
    done(status == QProcess::NormalExit && code == 0, QString::fromUtf8(process->readAllStandardOutput()),
         QString::fromUtf8(process->readAllStandardError()).trimmed());
  });
  connect(process, &QProcess::errorOccurred, this, [this, process, done](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    endBusy();
    process->deleteLater();
    done(false, QString(), process->errorString());
  });
  process->start();
}

bool StoreRunsView::exportWeights(qint64 id, const QString& path) {
  const std::optional<ModelSource> src = modelSource(id);
  if (!src) return false;
  QString target = path;
  if (target.isEmpty()) {
    const QString suffix = src->lora    ? QStringLiteral("-merged-hf")
                           : src->llama ? QStringLiteral("-hf")
                                        : QStringLiteral("-gpt2");
    const QString suggested = QDir::home().filePath(src->name + suffix);
    target = chooseExportFolder ? chooseExportFolder(suggested)
                                : QFileDialog::getSaveFileName(this, tr("Export weights to a folder"), suggested);
    if (target.isEmpty()) return false;
  }
  QStringList args{QStringLiteral("export"), QStringLiteral("--checkpoint"), src->runDir, QStringLiteral("--format"),
                   src->llama ? QStringLiteral("hf") : QStringLiteral("safetensors"), QStringLiteral("--out")};
  // GPT-2 safetensors go into the folder (a trailing '/' says it is one).
  args << (src->llama || target.endsWith(QLatin1Char('/')) ? target : target + QLatin1Char('/'));
  if (src->llama && !src->tokenizer.isEmpty() && QFileInfo(src->tokenizer).isDir())
    args << QStringLiteral("--tokenizer") << src->tokenizer;
  // A LoRA run's hf export is its base with the adapter merged in (the worker reads the base again);
  // a QLoRA run's base is dequantised from NF4 first, which the message says: not the original weights.
  const QString busy =
      src->qlora  ? tr("Merging the adapter of %1 into its base dequantised from 4-bit NF4…").arg(src->name)
      : src->lora ? tr("Merging the adapter of %1 into its base…").arg(src->name)
                  : tr("Exporting the weights of %1…").arg(src->name);
  withCheckpoint(*src, [=, this, worker = src->worker, lora = src->lora, qlora = src->qlora](const QString& dir) mutable {
  args[2] = dir;
  runWorker(
      worker, args, busy,
      [this, target, lora, qlora](bool ok, const QString&, const QString& err) {
        if (ok) {
          emit message(qlora ? tr("Merged model exported to %1: the adapter merged into its base dequantised "
                                  "from 4-bit NF4 (QLoRA), not into the original weights")
                                   .arg(target)
                       : lora ? tr("Merged model exported to %1").arg(target)
                              : tr("Weights exported to %1").arg(target));
        } else {
          emit errorRaised(tr("Export failed: %1").arg(err));
        }
        emit weightsExported(ok, ok ? target : err);
      });
  });
  return true;
}

bool StoreRunsView::exportAdapter(qint64 id, const QString& path) {
  const std::optional<ModelSource> src = modelSource(id);
  if (!src) return false;
  if (!src->lora) {
    emit errorRaised(
        tr("%1 trained every weight, so it has no LoRA adapter: export its weights instead.").arg(src->name));
    return false;
  }
  QString target = path;
  if (target.isEmpty()) {
    const QString suggested = QDir::home().filePath(src->name + QStringLiteral("-adapter"));
    target = chooseExportFolder
                 ? chooseExportFolder(suggested)
                 : QFileDialog::getSaveFileName(this, tr("Export the LoRA adapter to a folder"), suggested);
    if (target.isEmpty()) return false;
  }
  QStringList args{
      QStringLiteral("export"), QStringLiteral("--checkpoint"), src->runDir, QStringLiteral("--format"),
      QStringLiteral("peft"),   QStringLiteral("--out"),        target};
  withCheckpoint(*src, [=, this, worker = src->worker, name = src->name, qlora = src->qlora](const QString& dir) mutable {
  args[2] = dir;
  runWorker(
      worker, args, tr("Exporting the LoRA adapter of %1…").arg(name),
      [this, target, qlora](bool ok, const QString&, const QString& err) {
        if (ok && qlora)
          emit message(
              tr("LoRA adapter exported to %1 (PEFT: PeftModel.from_pretrained(base, folder)); trained "
                 "over the base in 4-bit NF4 (QLoRA): load the base with bitsandbytes' 4-bit NF4 for "
                 "the model it was trained as")
                  .arg(target));
        else if (ok)
          emit message(
              tr("LoRA adapter exported to %1 (PEFT: PeftModel.from_pretrained(base, folder))").arg(target));
        else
          emit errorRaised(tr("Export failed: %1").arg(err));
        emit adapterExported(ok, ok ? target : err);
      });
  });
  return true;
}

bool StoreRunsView::sampleModel(qint64 id, const QString& prompt) {
  const std::optional<ModelSource> src = modelSource(id);
  if (!src) return false;
  QString text = prompt;
  if (text.isEmpty()) {
    if (askPrompt) {
      const std::optional<QString> asked = askPrompt();
      if (!asked) return false;
      text = *asked;
    } else {
      bool ok = false;
      text = QInputDialog::getMultiLineText(this, tr("Sample from %1").arg(src->name),
                                            tr("Prompt (the model continues it, 64 tokens):"), QString(), &ok);
      if (!ok) return false;
    }
  }
  QStringList args{QStringLiteral("sample"), QStringLiteral("--checkpoint"), src->runDir,
                   QStringLiteral("--tokens"), QStringLiteral("64"), QStringLiteral("--top-k"), QStringLiteral("40")};
  if (!src->tokenizer.isEmpty()) {
    args << QStringLiteral("--tokenizer") << src->tokenizer << QStringLiteral("--prompt") << text;
  } else {
    // No tokenizer (the synthetic demo): the model's own token ids, from token 0.
    args << QStringLiteral("--prompt-ids") << QStringLiteral("0");
  }
  withCheckpoint(*src, [=, this, worker = src->worker, name = src->name, ids = src->tokenizer.isEmpty()](
                           const QString& dir) mutable {
  args[2] = dir;
  runWorker(worker, args, tr("Sampling from %1…").arg(name),
            [this, name, ids](bool ok, const QString& out, const QString& err) {
              const QString result =
                  !ok ? err
                  : ids ? tr("Token ids (this run has no tokenizer to decode them): %1").arg(out.trimmed())
                        : out.trimmed();
              if (!ok) emit errorRaised(tr("Sampling failed: %1").arg(err));
              if (ok) {
                if (showSample) {
                  showSample(result);
                } else {
                  QMessageBox box(QMessageBox::NoIcon, tr("Sample from %1").arg(name), result, QMessageBox::Close, this);
                  box.setTextInteractionFlags(Qt::TextSelectableByMouse);
                  box.exec();
                }
              }
              emit sampled(ok, result);
            });
  });
  return true;
}

}  // namespace flotilla::ui
