// The stored runs view's actions on a run's model (see storerunsview.h): export its weights (a LoRA
// run's adapter as a PEFT folder, or its base with the adapter merged in; the Export dialog picks
// format, checkpoint, dtype and folder), sample from it (the Sample dialog) and evaluate it on a task
// file (the Evaluate dialog), each by running flotilla-worker on a checkpoint of the run.
#include "ui/runs/storerunsview.h"

#include <QDesktopServices>
#include <QDir>
#include <QFileInfo>
#include <QMessageBox>
#include <QPointer>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QUrl>

#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/interop/hf_model.h"
#include "runs/sample_text.h"
#include "runs/service.h"
#include "ui/common/background.h"
#include "ui/runs/evaluatedialog.h"
#include "ui/runs/exportdialog.h"
#include "ui/runs/localruns.h"
#include "ui/runs/sampledialog.h"
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
    src.initFrom = QString::fromStdString(config->model.init_from);
    src.vocabSize = config->model.vocab_size;
    if (!src.tokenizer.isEmpty() && !QFileInfo::exists(src.tokenizer)) src.tokenizer.clear();  // not here
  }
  return src;
}

void StoreRunsView::withCheckpoint(const ModelSource& src, std::function<void(const QString& dir)> then,
                                   qint64 step) {
  if (!src.elsewhere) {
    then(src.runDir);
    return;
  }
  const runs::ServiceOptions options = m_runs->serviceOptions();
  beginBusy(tr("Fetching the newest checkpoint of %1…").arg(src.name));
  runInBackground(
      this,
      [options, id = src.id, step]() -> std::pair<QString, QString> {
        try {
          const std::optional<int64_t> which = step >= 0 ? std::optional<int64_t>(step) : std::nullopt;
          return {QString::fromStdString(runs::RunService(options).fetch_checkpoint(id, which)), QString()};
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
  const QString format = src->llama ? QStringLiteral("hf") : QStringLiteral("safetensors");
  QString target = path;
  if (target.isEmpty()) {
    if (!chooseExportFolder) {  // the Export dialog: format, checkpoint, dtype and folder
      exportWithDialog(id, format);
      return true;
    }
    const QString suffix = src->lora    ? QStringLiteral("-merged-hf")
                           : src->llama ? QStringLiteral("-hf")
                                        : QStringLiteral("-gpt2");
    target = chooseExportFolder(QDir::home().filePath(src->name + suffix));
    if (target.isEmpty()) return false;
  }
  ExportRequest request;
  request.format = format;
  request.dtype = QStringLiteral("source");
  request.folder = QDir::cleanPath(QFileInfo(target).absoluteFilePath());
  runExport(*src, request);
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
    if (!chooseExportFolder) {
      exportWithDialog(id, QStringLiteral("peft"));
      return true;
    }
    target = chooseExportFolder(QDir::home().filePath(src->name + QStringLiteral("-adapter")));
    if (target.isEmpty()) return false;
  }
  ExportRequest request;
  request.format = QStringLiteral("peft");
  request.dtype = QStringLiteral("source");
  request.folder = QDir::cleanPath(QFileInfo(target).absoluteFilePath());
  runExport(*src, request);
  return true;
}

void StoreRunsView::exportWithDialog(qint64 id, const QString& format) {
  checkpointChoices(id, [this, id, format](const QList<CheckpointChoice>& choices, const QString& error) {
    if (!error.isEmpty()) {
      emit errorRaised(tr("Cannot list the checkpoints to export: %1").arg(error));
      return;
    }
    const std::optional<ModelSource> src = modelSource(id);
    if (!src) return;
    ExportRun run;
    run.name = src->name;
    run.llama = src->llama;
    run.lora = src->lora;
    run.qlora = src->qlora;
    run.tokenizer = src->tokenizer;
    run.checkpoints = choices;
    std::string why;
    run.sourceDtype = QString::fromStdString(interop::source_dtype(src->initFrom.toStdString(), &why));
    run.sourceWhy = QString::fromStdString(why);
    ExportDialog dialog(run, format, this);
    const bool accepted = answerExport ? answerExport(dialog) : dialog.exec() == QDialog::Accepted;
    if (!accepted || !dialog.canAccept()) return;
    runExport(*src, dialog.request(), /*offerToOpen=*/true);
  });
}

void StoreRunsView::runExport(const ModelSource& src, const ExportRequest& request, bool offerToOpen) {
  ExportRun run;
  run.llama = src.llama;
  run.tokenizer = src.tokenizer;
  const bool peft = request.format == QLatin1String("peft");
  const bool lora = src.lora && !peft, qlora = src.qlora;
  // A LoRA run's hf export is its base with the adapter merged in (the worker reads the base again);
  // a QLoRA run's base is dequantised from NF4 first, which the message says: not the original weights.
  const QString busy =
      peft          ? tr("Exporting the LoRA adapter of %1…").arg(src.name)
      : src.qlora   ? tr("Merging the adapter of %1 into its base dequantised from 4-bit NF4…").arg(src.name)
      : src.lora    ? tr("Merging the adapter of %1 into its base…").arg(src.name)
                    : tr("Exporting the weights of %1…").arg(src.name);
  const QString target = request.folder;
  auto then = [=, this, worker = src.worker](const QString& dir) {
    runWorker(worker, exportWorkerArgs(run, request, dir), busy,
              [this, target, peft, lora, qlora, offerToOpen](bool ok, const QString& out, const QString& err) {
                if (!ok) {
                  emit errorRaised(tr("Export failed: %1").arg(err));
                } else {
                  const QString text =
                      peft && qlora
                          ? tr("LoRA adapter exported to %1 (PEFT: PeftModel.from_pretrained(base, folder)); "
                               "trained over the base in 4-bit NF4 (QLoRA): load the base with bitsandbytes' "
                               "4-bit NF4 for the model it was trained as")
                                .arg(target)
                      : peft ? tr("LoRA adapter exported to %1 (PEFT: PeftModel.from_pretrained(base, folder))")
                                   .arg(target)
                      : qlora ? tr("Merged model exported to %1: the adapter merged into its base dequantised "
                                   "from 4-bit NF4 (QLoRA), not into the original weights")
                                    .arg(target)
                      : lora  ? tr("Merged model exported to %1").arg(target)
                              : tr("Weights exported to %1").arg(target);
                  emit message(text);
                  // The worker's own line says which checkpoint and dtype ("exported … (fp32, as the source …)").
                  const QString details = out.section(QLatin1Char('\n'), 0, 0).trimmed();
                  if (showExported) {
                    showExported(target, details);
                  } else if (offerToOpen) {
                    QMessageBox box(QMessageBox::Information, tr("Export finished"), text, QMessageBox::Close, this);
                    box.setInformativeText(details);
                    box.setTextInteractionFlags(Qt::TextSelectableByMouse);
                    QPushButton* open = box.addButton(tr("Open folder"), QMessageBox::ActionRole);
                    box.exec();
                    if (box.clickedButton() == open) QDesktopServices::openUrl(QUrl::fromLocalFile(target));
                  }
                }
                if (peft)
                  emit adapterExported(ok, ok ? target : err);
                else
                  emit weightsExported(ok, ok ? target : err);
              });
  };
  if (!request.checkpointDir.isEmpty())
    then(request.checkpointDir);  // the chosen checkpoint, here
  else
    withCheckpoint(src, then, request.step);
}

bool StoreRunsView::sampleModel(qint64 id, const QString& prompt) {
  const std::optional<ModelSource> src = modelSource(id);
  if (!src) return false;
  if (prompt.isEmpty()) {  // the Sample dialog, on the newest checkpoint (fetched when elsewhere)
    withCheckpoint(*src, [this, src = *src](const QString& dir) {
      auto* dialog = new SampleDialog(src.name, src.worker, dir, src.tokenizer, src.vocabSize, this);
      dialog->setAttribute(Qt::WA_DeleteOnClose);
      dialog->show();
    });
    return true;
  }
  runs::SampleRequest request;
  request.tokenizer = src->tokenizer.toStdString();
  request.prompt = prompt.toStdString();
  // No tokenizer (the synthetic demo): a prompt that is not token ids cannot be read: token 0.
  const bool ids = src->tokenizer.isEmpty();
  if (ids && prompt.contains(QRegularExpression(QStringLiteral("[^0-9\\s]")))) request.prompt.clear();
  withCheckpoint(*src, [=, this, worker = src->worker, name = src->name](const QString& dir) mutable {
    request.checkpoint = dir.toStdString();
    QStringList args;
    for (const std::string& a : runs::sample_worker_args(request)) args << QString::fromStdString(a);
    runWorker(worker, args, tr("Sampling from %1…").arg(name),
              [this, name, ids](bool ok, const QString& out, const QString& err) {
                const QString result =
                    !ok   ? err
                    : ids ? tr("Token ids (this run has no tokenizer to decode them): %1").arg(out.trimmed())
                          : out.trimmed();
                if (!ok) emit errorRaised(tr("Sampling failed: %1").arg(err));
                if (ok) {
                  if (showSample) {
                    showSample(result);
                  } else {
                    QMessageBox box(QMessageBox::NoIcon, tr("Sample from %1").arg(name), result,
                                    QMessageBox::Close, this);
                    box.setTextInteractionFlags(Qt::TextSelectableByMouse);
                    box.exec();
                  }
                }
                emit sampled(ok, result);
              });
  });
  return true;
}

bool StoreRunsView::evaluate(qint64 id) {
  const std::optional<ModelSource> src = modelSource(id);
  if (!src) return false;
  checkpointChoices(id, [this, src = *src](const QList<CheckpointChoice>& choices, const QString& error) {
    if (!error.isEmpty()) {
      emit errorRaised(tr("Cannot list the checkpoints to evaluate: %1").arg(error));
      return;
    }
    if (choices.isEmpty()) {
      emit errorRaised(tr("%1 has no checkpoint to evaluate now.").arg(src.name));
      return;
    }
    auto* dialog = new EvaluateDialog(src.name, src.worker, choices, this);
    dialog->setTokenizer(src.tokenizer);  // the run's, as Sample passes it
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    // A checkpoint of a run elsewhere is fetched here first (the one chosen, by its step).
    dialog->resolveCheckpoint = [this, src, dialog](qint64 step, const QString& dir,
                                                    std::function<void(const QString&)> then) {
      if (!dir.isEmpty() && QDir(dir).exists()) return then(dir);
      QPointer<EvaluateDialog> alive(dialog);
      withCheckpoint(src, [alive, then](const QString& fetched) {
        if (alive) then(fetched);
      }, step);
    };
    dialog->store = [this, id = src.id](qint64 step, const runs::EvalOutcome& outcome, QStringList* names) {
      QString why;
      return m_store->storeEval(id, step, outcome, names, &why) ? QString() : why;
    };
    dialog->show();
    emit evaluateOpened(dialog);
  });
  return true;
}

}  // namespace flotilla::ui
