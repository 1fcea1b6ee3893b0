// The Model page's LoRA rows (issue 31): how the model trains — every weight (full fine-tuning) or
// low-rank adapters on the frozen model.init_from weights — and the adapters' rank, alpha (with the
// scale it gives), rsLoRA, dropout, target projections and an adapter folder to continue from
// (lora.init_from, read off the UI thread by the engine's read_peft_adapter_config).
//
// Decisions:
// - Every control writes the draft's [lora] at once, so the fit line, the Hardware page's memory bar
//   and the Review page's TOML follow each edit. Memory and the trainable count come from the
//   engine (make_plan, lora_parameter_count); no LoRA formula lives in the UI.
// - LoRA needs pretrained weights, so it is offered over a Hugging Face folder; for a named size or
//   custom dimensions the row says why instead of hiding the choice. A draft that has LoRA on anyway
//   (a template, an edited TOML) keeps the choice enabled, with validate()'s message under it.
// - An adapter folder that was read sets rank, alpha, rsLoRA and targets to its values, as the
//   worker's apply_lora_init_from does, and shows them read-only while it is chosen.
// - QLoRA (issue 38) is a third way to train, not a LoRA option: it changes what the base is, so it
//   sits beside Full and LoRA and its row says what it trades, with the planner's numbers.
#pragma once

#include <QFutureWatcher>
#include <QList>
#include <QObject>
#include <QPair>
#include <QString>

#include "engine/config/run_config.h"
#include "engine/interop/peft.h"
#include "ui/wizard/pagebase.h"

class QButtonGroup;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QRadioButton;
class QSpinBox;

namespace flotilla::ui {

class ConfigDraft;

struct PeftAdapterInfo {
  QString folder;  // as read
  bool ok = false;
  QString error;  // the engine's message when !ok
  flotilla::interop::PeftAdapterConfig config;
};

// Reads FOLDER/adapter_config.json with the engine's reader. Never throws; safe off the UI thread.
PeftAdapterInfo readPeftAdapter(const QString& folder);

// The lora.targets text for a set of projections: "all-linear", "attention", "mlp", or the comma list.
std::string loraTargetsText(uint32_t targets);
// "All linear (q, k, v, o, gate, up, down)", "Attention (q, k, v, o)" or "Custom (q, v)".
QString loraTargetsLabel(uint32_t targets);
// "scale α/r = 32/16 = 2", or with rsLoRA "scale α/√r = 32/√16 = 8" (the engine's LoraSpec::scale).
QString loraScaleText(int rank, double alpha, bool rslora);
// "4.88 M trainable, 3.6% of 135 M" for a config with LoRA on; "" when it is off or its [lora] or
// [model] values do not describe adapters yet.
QString loraTrainableText(const flotilla::RunConfig& config);
// What QLoRA trades, for a config with lora.base_quant = "nf4", from the planner: the bits per base
// parameter, the base's size against LoRA's ("the base takes 96.2 MiB instead of 360.0 MiB per
// device"), slower matmuls, a merged export from the quantised base. "" when QLoRA is off or the
// planner cannot run on the config.
QString qloraTradeText(const flotilla::RunConfig& config);

class LoraControls : public QObject {
  Q_OBJECT

 public:
  // The widgets are children of `page` (their object names are the tests' handles).
  LoraControls(ConfigDraft* draft, QWidget* page);
  ~LoraControls() override;

  // Adds the rows: Training (Full, LoRA, QLoRA), what QLoRA trades, Adapters (rank, alpha, rsLoRA,
  // scale), Dropout, Targets, Continue from.
  void addRows(QFormLayout* form);
  // (config path, widget) pairs for the page's bindField, so each problem shows under its field.
  QList<QPair<QString, QWidget*>> fields() const;
  // Fills the widgets from the draft; never writes back.
  void load();
  // After any change: which rows show, what is read-only, the scale and adapter texts.
  // `hfFolder`: the model comes from a Hugging Face folder (LoRA is offered).
  void refresh(bool hfFolder);
  // Blocks Next while an adapter is read.
  QStringList problems() const;
  // An adapter the engine refused, beside lora.init_from in the engine's words.
  QList<WizardPageBase::FieldProblem> fieldProblems() const;

  // Uses a PEFT adapter folder (as Browse… does; "" clears it); reads it on a worker thread.
  void chooseAdapter(const QString& folder);
  bool isReadingAdapter() const { return m_reading; }
  QString scaleText() const;
  // The adapter read last, as plain lines ("This adapter: r 4, alpha 8: scale α/r = 8/4 = 2", ...),
  // "Reading FOLDER…" while it is read, "" when none is chosen or the engine refused it.
  QString adapterText() const;
  QString unavailableText() const;

 signals:
  // The draft changed under the widgets (an adapter was applied): the page reloads them.
  void reloadRequested();
  // The page's own problems changed (a read ended): the page rechecks.
  void recheckRequested();

 private:
  // 0 full fine-tune, 1 LoRA, 2 QLoRA (LoRA over a 4-bit NF4 base).
  void setMethod(int method);
  void editTargets(uint32_t targets);
  uint32_t checkedTargets() const;
  void showTargets(uint32_t targets);
  void showValues();  // the draft's [lora] values in the widgets (not the adapter path being typed)
  void startRead();
  void onRead();
  bool adapterApplied() const;  // lora.init_from was read and its values are the draft's
  QList<QPair<QString, QString>> adapterRows() const;  // (heading, text) of the adapter read, or none

  ConfigDraft* m_draft;
  QWidget* m_page;
  QFormLayout* m_form = nullptr;
  QButtonGroup* m_training;
  QRadioButton* m_full;
  QRadioButton* m_lora;
  QRadioButton* m_qlora;
  QLabel* m_qloraInfo;
  QWidget* m_trainingRow;
  QLabel* m_unavailable;
  QWidget* m_adaptersRow;
  QSpinBox* m_rank;
  QDoubleSpinBox* m_alpha;
  QCheckBox* m_rslora;
  QLabel* m_scale;
  QDoubleSpinBox* m_dropout;
  QWidget* m_dropoutRow;
  QWidget* m_targetsRow;
  QComboBox* m_targetPreset;
  QList<QCheckBox*> m_targets;  // LoraTarget order
  QWidget* m_adapterRow;
  QLineEdit* m_adapterPath;
  QLabel* m_adapterInfo;
  bool m_loading = false;

  QFutureWatcher<PeftAdapterInfo> m_watcher;
  PeftAdapterInfo m_adapter;  // the adapter read last
  bool m_reading = false;     // a read runs (its finished signal not handled yet)
};

}  // namespace flotilla::ui
