// Wizard page 1, Model: the template to start from, the run's name and the model, chosen one of
// four ways: a named size (the presets, GPT-2 and Llama family), custom dimensions (GPT-2 or
// Llama family, with the Llama-only keys shown only for it), a Hugging Face folder, or a Hugging
// Face model by name from the local cache or downloaded into it (hubpicker.h), whose
// config.json sets every shape key (read off the UI thread by the engine's apply_hf_init_from, so
// the draft holds exactly what the worker will train) and whose architecture and weight files are
// shown read-only. Under all three: how it trains (every weight, or LoRA adapters over a folder's
// frozen weights: loracontrols.h), the parameter count, what trains of it and what fits on the
// chosen hardware.
//
// Decision: choosing a folder writes model.init_from (and model.arch = llama, the only family a
// folder can hold) at once, so the Review page and validate() see it while it is read; a folder
// that fails to read stays in the draft with the engine's message as the page's problem, which
// blocks Next until the folder is fixed or another choice is made. A name is kept as the name
// ("org/name": the engine pins its commit when the run starts) and read from its cached snapshot;
// Next (and Launch) wait while that model is downloaded.
#pragma once

#include <QFutureWatcher>

#include "ui/wizard/hffolder.h"
#include "ui/wizard/pagebase.h"

class QButtonGroup;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace flotilla::ui {

class HubPicker;
class LoraControls;
class TemplateStore;

class ModelPage : public WizardPageBase {
  Q_OBJECT

 public:
  enum Source { Named = 0, Custom = 1, HfFolder = 2, HfName = 3 };
  ModelPage(ConfigDraft* draft, TemplateStore* templates, QWidget* parent = nullptr);
  ~ModelPage() override;

  // Re-reads the template list (after Save as template).
  void reloadTemplates();
  QString parameterText() const;
  // "4.88 M trainable, 3.6% of 135 M" under LoRA, "All 135 M (full fine-tuning)" otherwise.
  QString trainableText() const;
  QString fitText() const;
  LoraControls* loraControls() const { return m_loraControls; }
  Source source() const { return m_source; }
  void setSource(Source source);
  // Uses a Hugging Face folder (as Browse… does); reads it on a worker thread (isReadingFolder()).
  void chooseHfFolder(const QString& folder);
  bool isReadingFolder() const { return m_reading; }
  // Uses a Hugging Face model by name ("org/name[@revision]"), read from its cached snapshot.
  void chooseHfName(const QString& name);
  HubPicker* hubPicker() const { return m_hub; }
  // The flotilla-worker that downloads models ("": beside the app, or on PATH).
  void setWorkerPath(const QString& path);
  // For the Review page: "Model: org/name from the Hugging Face cache, commit 1a2b3c4 …" for a
  // name ("" for the other sources), and why Launch must wait ("" when it need not).
  QString modelNote() const;
  QString launchBlocker() const;
  // The read-only summary of the folder read last ("" before one was read).
  QString hfSummary() const;

 signals:
  // modelNote() or launchBlocker() may have changed.
  void modelStateChanged();

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override;
  QList<FieldProblem> extraFieldProblems() const override;

 private:
  void applyTemplate(int index);
  void editDims();
  void editArch();
  void updateRows();
  void startRead();
  void onRead();
  bool hfSource() const { return m_source == HfFolder || m_source == HfName; }

  TemplateStore* m_templates;
  QString m_templateError;
  QFormLayout* m_form = nullptr;
  Source m_source = Named;
  QButtonGroup* m_sources;
  QComboBox* m_template;
  QLineEdit* m_name;
  QComboBox* m_preset;
  QComboBox* m_arch;
  QSpinBox* m_layers;
  QSpinBox* m_heads;
  QSpinBox* m_width;
  QSpinBox* m_kvHeads;
  QSpinBox* m_headDim;
  QSpinBox* m_ffn;
  QWidget* m_llamaFlags;
  QCheckBox* m_tied;
  QCheckBox* m_qkvBias;
  QCheckBox* m_qkNorm;
  QDoubleSpinBox* m_ropeTheta;
  QSpinBox* m_vocab;
  QSpinBox* m_maxSeq;
  QWidget* m_hfRow;
  QLineEdit* m_hfPath;
  QLabel* m_hfInfo;
  HubPicker* m_hub;
  LoraControls* m_loraControls;
  QLabel* m_params;
  QLabel* m_trainable;
  QLabel* m_fit;

  QFutureWatcher<HfFolderInfo> m_watcher;
  HfFolderInfo m_info;     // the folder read last
  bool m_reading = false;  // a read runs (its finished signal not handled yet)
};

}  // namespace flotilla::ui
