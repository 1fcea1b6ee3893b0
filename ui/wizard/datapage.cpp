// Data page (see datapage.h).
#include "ui/wizard/datapage.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>

#include "engine/interop/hf_model.h"
#include "engine/train/data_preflight.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/hffolder.h"

namespace flotilla::ui {
namespace {

QStringList splitInputs(const QString& text) {
  QStringList out;
  for (const QString& part : text.split(QLatin1Char(';'), Qt::SkipEmptyParts))
    if (!part.trimmed().isEmpty()) out << part.trimmed();
  return out;
}

// A line edit with a "Choose…" button beside it.
bool under(const std::string& path, const char* key) {
  return path == key || path.rfind(std::string(key) + ".", 0) == 0;
}

// A box's inputs on or off (its labels and messages stay enabled: never drawn greyed).
void setInputsEnabled(QWidget* box, bool on) {
  for (QWidget* w : box->findChildren<QWidget*>())
    if (qobject_cast<QLineEdit*>(w) || qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w) ||
        qobject_cast<QAbstractButton*>(w))
      w->setEnabled(on);
}

QWidget* withButton(QLineEdit* edit, QPushButton* button, QWidget* parent) {
  auto* row = new QWidget(parent);
  auto* layout = new QHBoxLayout(row);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(edit, 1);
  layout->addWidget(button);
  return row;
}

}  // namespace

DataPage::DataPage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft, {QStringLiteral("data"), QStringLiteral("train.seq_len")}, parent),
      m_modes(new QButtonGroup(this)),
      m_syntheticBox(new QWidget(this)),
      m_shardsBox(new QWidget(this)),
      m_prepareBox(new QWidget(this)),
      m_tokens(new QSpinBox(this)),
      m_train(new QLineEdit(this)),
      m_val(new QLineEdit(this)),
      m_trainInfo(new QLabel(this)),
      m_valInfo(new QLabel(this)),
      m_inputs(new QLineEdit(this)),
      m_tokSource(new QComboBox(this)),
      m_tokenizer(new QLineEdit(this)),
      m_trainVocab(new QSpinBox(this)),
      m_chatFormat(new QComboBox(this)),
      m_pack(new QCheckBox(
          tr("Pack documents: several per sequence, attention and positions kept within each"), this)),
      m_outDir(new QLineEdit(this)),
      m_prepare(new QPushButton(tr("Prepare shards"), this)),
      m_prepareInfo(new QLabel(this)),
      m_seqLen(new QSpinBox(this)),
      m_valChoice(new QComboBox(this)),
      m_valPercent(new QDoubleSpinBox(this)),
      m_fixes(new QWidget(this)),
      m_fixMicroBatch(new QPushButton(this)),
      m_fixValRows(new QPushButton(this)),
      m_fixNoVal(new QPushButton(tr("Train without validation"), this)),
      m_fixNote(new QLabel(this)),
      m_scanDelay(new QTimer(this)),
      m_prepareAgain(new QTimer(this)) {
  setTitle(tr("Data"));
  setSubTitle(
      tr("What the model reads: a synthetic demo corpus, token shards you already have, or text, "
         "prompt/completion and chat files to tokenize now (with loss masks and packing for fine-tuning)."));
  const char* names[] = {"synthetic", "shards", "prepare"};
  const QString labels[] = {tr("Synthetic demo corpus (deterministic; the loss has a known floor)"),
                            tr("Existing token shards (llm.c .bin files)"),
                            tr("Text or JSONL files, tokenized into shards here")};
  QWidget* boxes[] = {m_syntheticBox, m_shardsBox, m_prepareBox};
  for (int i = 0; i < 3; ++i) {
    auto* radio = new QRadioButton(labels[i], this);
    radio->setObjectName(QStringLiteral("source-%1").arg(QLatin1String(names[i])));
    m_modes->addButton(radio, i);
    addBlock(radio);
    addBlock(boxes[i]);
  }

  m_tokens->setObjectName(QStringLiteral("syntheticTokens"));
  m_tokens->setRange(0, 2'000'000'000);
  m_tokens->setSingleStep(100'000);
  m_tokens->setGroupSeparatorShown(true);
  m_tokens->setSuffix(tr(" tokens"));
  auto* synth = new QFormLayout(m_syntheticBox);
  synth->addRow(tr("Train tokens (validation gets a tenth)"), m_tokens);
  bindField(QStringLiteral("data.synthetic_tokens"), m_tokens);

  m_train->setObjectName(QStringLiteral("trainShards"));
  m_val->setObjectName(QStringLiteral("valShards"));
  m_trainInfo->setObjectName(QStringLiteral("trainInfo"));
  m_valInfo->setObjectName(QStringLiteral("valInfo"));
  m_train->setPlaceholderText(tr("a folder, a .bin file or a glob such as data/train_*.bin"));
  m_val->setPlaceholderText(tr("optional: validation shards"));
  for (QLabel* info : {m_trainInfo, m_valInfo}) info->setWordWrap(true);
  auto* chooseTrain = new QPushButton(tr("Folder…"), this);
  auto* chooseVal = new QPushButton(tr("Folder…"), this);
  auto* shards = new QFormLayout(m_shardsBox);
  shards->addRow(tr("Train shards"), withButton(m_train, chooseTrain, m_shardsBox));
  shards->addRow(QString(), m_trainInfo);
  shards->addRow(tr("Validation shards"), withButton(m_val, chooseVal, m_shardsBox));
  shards->addRow(QString(), m_valInfo);
  bindField(QStringLiteral("data.train"), m_train);
  bindField(QStringLiteral("data.val"), m_val);

  m_inputs->setObjectName(QStringLiteral("prepareInputs"));
  m_tokenizer->setObjectName(QStringLiteral("prepareTokenizer"));
  m_outDir->setObjectName(QStringLiteral("prepareOut"));
  m_prepare->setObjectName(QStringLiteral("prepareButton"));
  m_prepareInfo->setObjectName(QStringLiteral("prepareInfo"));
  m_prepareInfo->setWordWrap(true);
  m_tokSource->setObjectName(QStringLiteral("tokenizerSource"));
  m_trainVocab->setObjectName(QStringLiteral("trainVocabSize"));
  m_chatFormat->setObjectName(QStringLiteral("chatFormat"));
  m_pack->setObjectName(QStringLiteral("packDocuments"));
  m_inputs->setPlaceholderText(tr(
      "files separated by ';' (.txt: one document each; .jsonl: text, prompt/completion or chat records)"));
  m_tokenizer->setPlaceholderText(
      tr("a folder with tokenizer.json or GPT-2's vocab.json + merges.txt, or a tokenizer file"));
  m_tokSource->addItem(tr("the model's Hugging Face folder"), static_cast<int>(TokenizerSource::Model));
  m_tokSource->addItem(tr("a tokenizer folder or file"), static_cast<int>(TokenizerSource::File));
  m_tokSource->addItem(tr("train one here on the input text"), static_cast<int>(TokenizerSource::Train));
  m_tokSource->setCurrentIndex(1);
  m_trainVocab->setRange(257, 1 << 20);
  m_trainVocab->setValue(8192);
  m_trainVocab->setGroupSeparatorShown(true);
  m_trainVocab->setSuffix(tr(" tokens"));
  m_trainVocab->setToolTip(
      tr("The 256 bytes, the merges learned from the input text, and <|endoftext|>. The "
         "tokenizer is saved into the output folder."));
  m_chatFormat->addItem(tr("automatic (the tokenizer's own for chat, plain for prompt/completion)"),
                        QString());
  m_chatFormat->addItem(tr("llama3 (Llama 3.x)"), QStringLiteral("llama3"));
  m_chatFormat->addItem(tr("chatml (Qwen 2 / 2.5, SmolLM2)"), QStringLiteral("chatml"));
  m_chatFormat->addItem(tr("qwen3 (ChatML with think blocks)"), QStringLiteral("qwen3"));
  m_chatFormat->addItem(tr("plain (prompt + completion, no chat tokens)"), QStringLiteral("plain"));
  m_pack->setChecked(true);
  auto* addInputs = new QPushButton(tr("Add…"), this);
  auto* chooseTokDir = new QPushButton(tr("Folder…"), this);
  auto* chooseTok = new QPushButton(tr("File…"), this);
  auto* chooseOut = new QPushButton(tr("Folder…"), this);
  auto* prep = new QFormLayout(m_prepareBox);
  m_prepForm = prep;
  m_tokenizerRow = withButton(m_tokenizer, chooseTokDir, m_prepareBox);
  m_tokenizerRow->layout()->addWidget(chooseTok);
  prep->addRow(tr("Input files"), withButton(m_inputs, addInputs, m_prepareBox));
  prep->addRow(tr("Tokenizer from"), m_tokSource);
  prep->addRow(tr("Tokenizer"), m_tokenizerRow);
  prep->addRow(tr("Vocabulary to train"), m_trainVocab);
  prep->addRow(tr("Chat format"), m_chatFormat);
  prep->addRow(QString(), m_pack);
  m_seqLen->setObjectName(QStringLiteral("prepareSeqLen"));
  m_seqLen->setRange(1, 1 << 20);
  m_seqLen->setGroupSeparatorShown(true);
  m_seqLen->setSuffix(tr(" tokens"));
  m_seqLen->setToolTip(
      tr("Tokens per training row (train.seq_len, also on the Batch page). Documents are packed into "
         "rows of this length; a longer one is cut into pieces."));
  prep->addRow(tr("Sequence length"), m_seqLen);
  m_valChoice->setObjectName(QStringLiteral("validationChoice"));
  m_valChoice->addItem(QString(), ValidationBatch);  // text set in refreshDerived (the rows it holds)
  m_valChoice->addItem(tr("a share of the tokens"), ValidationShare);
  m_valChoice->addItem(tr("none: no validation loss (Validation every becomes 0)"), ValidationNone);
  m_valChoice->setToolTip(
      tr("The first documents are held out to measure validation loss. One batch is the least a "
         "measurement reads; a share of a small data set can be less than that."));
  m_valPercent->setObjectName(QStringLiteral("validationPercent"));
  m_valPercent->setRange(0.1, 50);
  m_valPercent->setDecimals(1);
  m_valPercent->setValue(5);
  m_valPercent->setSuffix(tr(" % of the tokens"));
  auto* valRow = new QWidget(m_prepareBox);
  auto* valLayout = new QHBoxLayout(valRow);
  valLayout->setContentsMargins(0, 0, 0, 0);
  valLayout->addWidget(m_valChoice, 1);
  valLayout->addWidget(m_valPercent);
  prep->addRow(tr("Validation split"), valRow);
  prep->addRow(tr("Output folder"), withButton(m_outDir, chooseOut, m_prepareBox));
  prep->addRow(QString(), m_prepare);
  for (QWidget* box : boxes) box->setContentsMargins(24, 0, 0, 0);
  // The preparation's report and the fixes stay outside the boxes: never greyed with them.
  m_prepareInfo->setContentsMargins(24, 0, 0, 0);
  addBlock(m_prepareInfo);
  bindField(QStringLiteral("train.seq_len"), m_seqLen);

  m_fixes->setObjectName(QStringLiteral("dataFixes"));
  m_fixMicroBatch->setObjectName(QStringLiteral("fixMicroBatch"));
  m_fixValRows->setObjectName(QStringLiteral("fixValidationRows"));
  m_fixNoVal->setObjectName(QStringLiteral("fixNoValidation"));
  m_fixNote->setObjectName(QStringLiteral("fixNote"));
  m_fixNote->setWordWrap(true);
  auto* fixLayout = new QVBoxLayout(m_fixes);
  fixLayout->setContentsMargins(0, 0, 0, 0);
  auto* fixButtons = new QHBoxLayout;
  fixButtons->addWidget(new QLabel(tr("To go on:"), m_fixes));
  fixButtons->addWidget(m_fixMicroBatch);
  fixButtons->addWidget(m_fixValRows);
  fixButtons->addWidget(m_fixNoVal);
  fixButtons->addStretch(1);
  fixLayout->addLayout(fixButtons);
  m_fixes->hide();
  m_fixNote->hide();
  pageLayout()->addWidget(m_fixes);    // under the problems it fixes
  pageLayout()->addWidget(m_fixNote);  // what a fix changed, once it is gone

  m_prepareAgain->setSingleShot(true);
  m_prepareAgain->setInterval(400);
  connect(m_prepareAgain, &QTimer::timeout, this, [this] {
    if (isPreparing())
      m_prepareAgain->start();  // after the running one: it was asked for before this change
    else if (m_mode == Prepare && m_prepared)
      startPrepare();
  });
  connect(m_seqLen, &QSpinBox::valueChanged, this, [this](int v) {
    if (loading()) return;
    draft()->editKeepingBatch([&](RunConfig& c) { c.train.seq_len = v; }, ConfigDraft::BatchEdit::Batch);
    prepareAgainSoon();
  });
  connect(m_valChoice, &QComboBox::activated, this,
          [this] { setValidation(static_cast<Validation>(m_valChoice->currentData().toInt())); });
  connect(m_valPercent, &QDoubleSpinBox::valueChanged, this, [this] {
    if (!loading()) prepareAgainSoon();
  });
  connect(m_fixMicroBatch, &QPushButton::clicked, this, [this] {
    const int b = m_fitMicroBatch;
    if (b < 1) return;
    draft()->editKeepingBatch([&](RunConfig& c) { c.train.micro_batch = b; }, ConfigDraft::BatchEdit::Batch);
    m_fixNote->setText(draft()->batchNote());
    m_fixNote->setVisible(!m_fixNote->text().isEmpty());
  });
  connect(m_fixValRows, &QPushButton::clicked, this, [this] {
    m_valChoice->setCurrentIndex(m_valChoice->findData(ValidationBatch));
    setValidation(ValidationBatch);
    startPrepare();
  });
  connect(m_fixNoVal, &QPushButton::clicked, this, [this] {
    if (m_mode == Prepare) {
      setValidation(ValidationNone);
      startPrepare();
      return;
    }
    m_val->clear();
    draft()->edit([&](RunConfig& c) {
      c.data.val.clear();
      c.eval.every = 0;
    });
  });

  m_scanDelay->setSingleShot(true);
  m_scanDelay->setInterval(250);
  connect(m_scanDelay, &QTimer::timeout, this, &DataPage::startScan);
  connect(&m_scanWatcher, &QFutureWatcher<QList<ShardScan>>::finished, this, &DataPage::onScanned);
  connect(&m_prepareWatcher, &QFutureWatcher<PrepareSummary>::finished, this, &DataPage::onPrepared);
  connect(m_tokSource, &QComboBox::activated, this, [this] {
    m_tokSourceChosen = true;
    updateVisibility();
  });
  connect(m_modes, &QButtonGroup::idClicked, this, [this](int id) { setMode(static_cast<Mode>(id)); });
  connect(m_tokens, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.data.synthetic_tokens = v; });
  });
  connect(m_train, &QLineEdit::textEdited, this, [this](const QString& t) {
    draft()->edit([&](RunConfig& c) {
      c.data.train = shardPattern(t.trimmed(), QStringLiteral("train")).toStdString();
    });
  });
  connect(m_val, &QLineEdit::textEdited, this, [this](const QString& t) {
    draft()->edit(
        [&](RunConfig& c) { c.data.val = shardPattern(t.trimmed(), QStringLiteral("val")).toStdString(); });
  });
  auto chooseFolder = [this](QLineEdit* edit, const char* role) {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Choose a folder"), edit->text());
    if (dir.isEmpty()) return;
    edit->setText(shardPattern(dir, QLatin1String(role)));
    emit edit->textEdited(edit->text());
  };
  connect(chooseTrain, &QPushButton::clicked, this, [this, chooseFolder] { chooseFolder(m_train, "train"); });
  connect(chooseVal, &QPushButton::clicked, this, [this, chooseFolder] { chooseFolder(m_val, "val"); });
  connect(addInputs, &QPushButton::clicked, this, [this] {
    const QStringList files = QFileDialog::getOpenFileNames(this, tr("Text or JSONL files"));
    if (!files.isEmpty())
      m_inputs->setText((splitInputs(m_inputs->text()) + files).join(QStringLiteral("; ")));
  });
  connect(chooseTokDir, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Tokenizer folder"), m_tokenizer->text());
    if (!d.isEmpty()) m_tokenizer->setText(d);
  });
  connect(chooseTok, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Tokenizer file"), m_tokenizer->text());
    if (!f.isEmpty()) m_tokenizer->setText(f);
  });
  connect(chooseOut, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("Output folder"), m_outDir->text());
    if (!d.isEmpty()) m_outDir->setText(d);
  });
  connect(m_prepare, &QPushButton::clicked, this, &DataPage::startPrepare);
}

DataPage::~DataPage() {
  m_scanWatcher.waitForFinished();
  m_prepareWatcher.waitForFinished();
}

void DataPage::setMode(Mode mode) {
  m_mode = mode;
  if (QAbstractButton* b = m_modes->button(mode)) b->setChecked(true);
  updateVisibility();
  draft()->edit([&](RunConfig& c) { applyChoice(c); });
}

void DataPage::applyChoice(RunConfig& c) {
  const RunConfig defaults;
  // Text files not prepared yet point at no shards: the config stays a valid synthetic one (Next
  // waits on "Prepare the shards first"), not "shards" with an empty data.train to complain about.
  c.data.source = m_mode == Synthetic || (m_mode == Prepare && !m_prepared) ? "synthetic" : "shards";
  if (m_mode == Synthetic) {
    c.data.train.clear();
    c.data.val.clear();
    c.data.synthetic_tokens = m_tokens->value();
  } else {
    c.data.synthetic_tokens = defaults.data.synthetic_tokens;
    if (m_mode == Shards) {
      c.data.train = shardPattern(m_train->text().trimmed(), QStringLiteral("train")).toStdString();
      c.data.val = shardPattern(m_val->text().trimmed(), QStringLiteral("val")).toStdString();
    } else {
      c.data.train = m_prepared ? m_preparedTrain.toStdString() : std::string();
      c.data.val = m_prepared ? m_preparedVal.toStdString() : std::string();
    }
  }
  // "No validation" holds eval.every at 0; another choice gives back the value it replaced.
  if (m_mode == Prepare && validation() == ValidationNone) {
    if (m_evalEveryBefore < 0) m_evalEveryBefore = c.eval.every;
    c.eval.every = 0;
  } else if (m_evalEveryBefore >= 0) {
    if (c.eval.every == 0) c.eval.every = m_evalEveryBefore;
    m_evalEveryBefore = -1;
  }
}

void DataPage::updateVisibility() {
  // Only the chosen source's fields are shown: a hidden field's problem is listed at the foot of
  // the page, in red, instead of greyed inside a disabled box.
  m_syntheticBox->setVisible(m_mode == Synthetic);
  m_shardsBox->setVisible(m_mode == Shards);
  m_prepareBox->setVisible(m_mode == Prepare);
  // The report while and after preparing; a message that blocks Next is a problem (red, listed).
  m_prepareInfo->setVisible(m_mode == Prepare && (m_prepared || m_preparing) && !m_prepareMessage.isEmpty());
  setInputsEnabled(m_prepareBox, !isPreparing());
  const TokenizerSource source = tokenizerSource();
  m_prepForm->setRowVisible(m_tokenizerRow, source == TokenizerSource::File);
  m_prepForm->setRowVisible(m_trainVocab, source == TokenizerSource::Train);
  m_valPercent->setVisible(validation() == ValidationShare);
}

DataPage::Validation DataPage::validation() const {
  return static_cast<Validation>(m_valChoice->currentData().toInt());
}

void DataPage::setValidation(Validation v) {
  m_valChoice->setCurrentIndex(m_valChoice->findData(v));
  updateVisibility();
  draft()->edit([&](RunConfig& c) { applyChoice(c); });
  prepareAgainSoon();
}

qint64 DataPage::batchRows() const {
  const RunConfig& c = draft()->config();
  return qint64{std::max(1, c.parallel.dp)} * std::max(1, c.train.micro_batch);
}

void DataPage::prepareAgainSoon() {
  if (m_mode == Prepare && m_prepared) m_prepareAgain->start();
}

void DataPage::updateFixes() {
  const RunConfig& c = draft()->config();
  bool valProblem = false, dataProblem = false;
  for (const auto& p : draft()->problems()) {
    valProblem = valProblem || under(p.path, "data.val");
    dataProblem = dataProblem || under(p.path, "data.val") || under(p.path, "data.train");
  }
  // Preparing failed (a one-batch split the data cannot fill, say): preparing without validation
  // is a way on from here.
  if (m_mode == Prepare && !m_prepared && !isPreparing() && !m_summary.ok && !m_summary.error.isEmpty() &&
      validation() != ValidationNone) {
    m_fixMicroBatch->hide();
    m_fixValRows->hide();
    m_fixNoVal->show();
    m_fixes->show();
    return;
  }
  if (!dataProblem || c.data.source != "shards" || isPreparing() || isScanning()) {
    m_fixes->hide();
    return;
  }
  // The largest micro-batch below this one that the worker's own preflight accepts, the global
  // batch kept as the Batch page keeps it (cached on what it depends on).
  const QString key = QStringList{QString::fromStdString(c.data.train),
                                  QString::fromStdString(c.data.val),
                                  QString::number(c.train.micro_batch),
                                  QString::number(c.train.seq_len),
                                  QString::number(c.parallel.dp),
                                  QString::number(m_summary.result.val_rows),
                                  QString::number(m_summary.result.train_rows)}
                          .join(QChar(0x1f));
  if (key != m_fitKey) {
    m_fitKey = key;
    m_fitMicroBatch = 0;
    for (int b = c.train.micro_batch - 1; b >= 1 && m_fitMicroBatch == 0; --b) {
      RunConfig smaller = c;
      smaller.train.micro_batch = b;
      smaller.data.checked = false;  // sizes decide it: headers only, never a token scan on this thread
      keepGlobalBatch(c, smaller);
      if (flotilla::preflight_data(smaller).empty()) m_fitMicroBatch = b;
    }
  }
  m_fixMicroBatch->setText(tr("Lower the micro-batch to %1 (the global batch is kept)").arg(m_fitMicroBatch));
  m_fixMicroBatch->setVisible(m_fitMicroBatch > 0);
  m_fixValRows->setText(tr("Prepare again with one batch of validation (%1 rows)").arg(batchRows()));
  m_fixValRows->setVisible(valProblem && m_mode == Prepare && m_prepared &&
                           !(validation() == ValidationBatch && m_summary.valRows == batchRows()));
  // Prepared here, the validation documents can go back to training (a train split too small).
  const bool noVal = valProblem || (m_mode == Prepare && m_prepared && !c.data.val.empty());
  m_fixNoVal->setVisible(noVal);
  m_fixes->setVisible(m_fitMicroBatch > 0 || noVal || m_fixValRows->isVisibleTo(m_fixes));
}

void DataPage::syncTokenizerSource() {
  // A model by name: its cached snapshot's tokenizer (issue 40).
  const bool hf = flotilla::interop::is_hf_folder(modelFolderOf(draft()->config().model.init_from));
  if (auto* model = qobject_cast<QStandardItemModel*>(m_tokSource->model()))
    if (QStandardItem* item = model->item(0)) {
      item->setEnabled(hf);
      item->setToolTip(hf ? QString() : tr("The model is not from a Hugging Face folder (Model page)."));
    }
  // The model's own tokenizer is the default for a Hugging Face model, until the user picks one.
  if (hf && !m_tokSourceChosen) setTokenizerSource(TokenizerSource::Model);
  if (!hf && tokenizerSource() == TokenizerSource::Model) setTokenizerSource(TokenizerSource::File);
}

TokenizerSource DataPage::tokenizerSource() const {
  return static_cast<TokenizerSource>(m_tokSource->currentData().toInt());
}

void DataPage::setTokenizerSource(TokenizerSource source) {
  m_tokSource->setCurrentIndex(m_tokSource->findData(static_cast<int>(source)));
  updateVisibility();
}

void DataPage::load() {
  const RunConfig& c = draft()->config();
  if (c.data.source == "synthetic") {
    if (!(m_mode == Prepare && !m_prepared)) m_mode = Synthetic;  // unprepared text files stay chosen
  } else if (m_mode == Synthetic) {
    m_mode = Shards;
  }
  if (QAbstractButton* b = m_modes->button(m_mode)) b->setChecked(true);
  // The unchosen sources' fields keep what was typed in them (the config does not hold it).
  if (c.data.source == "synthetic")
    m_tokens->setValue(static_cast<int>(std::min<int64_t>(c.data.synthetic_tokens, m_tokens->maximum())));
  else {
    m_train->setText(QString::fromStdString(c.data.train));
    m_val->setText(QString::fromStdString(c.data.val));
  }
  m_seqLen->setValue(c.train.seq_len);
  syncTokenizerSource();
  updateVisibility();
}

void DataPage::refreshDerived() {
  const RunConfig& c = draft()->config();
  const QString train = QString::fromStdString(c.data.train), val = QString::fromStdString(c.data.val);
  const bool known = m_scans.size() == 2 && m_scans[0].pattern == train && m_scans[1].pattern == val;
  if (c.data.source == "shards" && !known && !m_scanPending) scheduleScan();
  if (m_scanPending || !known) {
    m_trainInfo->setText(train.isEmpty() ? QString() : tr("reading…"));
    m_valInfo->setText(val.isEmpty() ? QString() : tr("reading…"));
  } else {
    // A scan's error is the problem shown under the field (red): not repeated here.
    m_trainInfo->setText(m_scans[0].error.isEmpty() ? describeScan(m_scans[0]) : QString());
    m_valInfo->setText(val.isEmpty()                ? tr("none: validation loss will not be measured")
                       : m_scans[1].error.isEmpty() ? describeScan(m_scans[1])
                                                    : QString());
  }
  m_trainInfo->setVisible(!m_trainInfo->text().isEmpty());
  m_valInfo->setVisible(!m_valInfo->text().isEmpty());
  m_prepareInfo->setText(m_prepareMessage);
  m_prepareInfo->setVisible(m_mode == Prepare && (m_prepared || m_preparing) && !m_prepareMessage.isEmpty());
  m_valChoice->setItemText(m_valChoice->findData(ValidationBatch),
                           batchRows() == 1
                               ? tr("one batch: 1 row (ranks × micro-batch)")
                               : tr("one batch: %1 rows (ranks × micro-batch)").arg(batchRows()));
  // "One batch" follows the batch: a larger one (the Batch or Hardware page) prepares again.
  if (m_mode == Prepare && m_prepared && validation() == ValidationBatch && m_summary.valRows != batchRows())
    prepareAgainSoon();
  updateFixes();
}

void DataPage::scheduleScan() {
  m_scanPending = true;
  m_scanDelay->start();
}

void DataPage::startScan() {
  if (m_scanning) {
    m_scanDelay->start();  // the running scan's result will be stale; read again after it
    return;
  }
  const QString train = QString::fromStdString(draft()->config().data.train);
  const QString val = QString::fromStdString(draft()->config().data.val);
  m_scanning = true;
  m_scanWatcher.setFuture(QtConcurrent::run([train, val] {
    return QList<ShardScan>{scanShards(train), scanShards(val)};
  }));
}

void DataPage::onScanned() {
  m_scanning = false;
  m_scans = m_scanWatcher.result();
  m_scanPending = m_scanDelay->isActive();
  recheck();
}

bool DataPage::isScanning() const { return m_scanPending; }
bool DataPage::isPreparing() const { return m_preparing; }
QString DataPage::trainSummary() const { return m_scanPending ? QString() : m_trainInfo->text(); }
QString DataPage::valSummary() const { return m_scanPending ? QString() : m_valInfo->text(); }
QString DataPage::prepareStatus() const { return m_prepareMessage; }

QStringList DataPage::extraProblems() const {
  const RunConfig& c = draft()->config();
  // A Hugging Face model's vocabulary is its checkpoint's: the shards' ids must fit in it.
  if (m_prepared && c.data.train == m_preparedTrain.toStdString() &&
      m_summary.tokenizerVocab > c.model.vocab_size)
    return {tr("The tokenizer has %1 tokens but the model's vocabulary (model.vocab_size) is %2: ids past it "
               "have "
               "no embedding row. Use the model's own tokenizer, or a model with a larger vocabulary.")
                .arg(QLocale().toString(m_summary.tokenizerVocab), QLocale().toString(c.model.vocab_size))};
  if (m_mode == Prepare) {
    if (isPreparing()) return {tr("Preparing the shards…")};
    if (!m_prepared)
      return {m_prepareMessage.isEmpty()
                  ? tr("Prepare the shards first: input files, a tokenizer and an output folder, then "
                       "Prepare shards.")
                  : m_prepareMessage};
  }
  if (c.data.source != "shards" || c.data.train.empty()) return {};
  if (m_scanPending || m_scans.size() != 2) return {tr("Reading the shards…")};
  return {};
}

QList<WizardPageBase::FieldProblem> DataPage::extraFieldProblems() const {
  // Shown under the field (the engine's words, as the preflight's own message for it reads).
  const RunConfig& c = draft()->config();
  if (c.data.source != "shards" || c.data.train.empty() || m_scanPending || m_scans.size() != 2) return {};
  QList<FieldProblem> out;
  if (!m_scans[0].error.isEmpty())
    out.append({QStringLiteral("data.train"), QStringLiteral("data.train: ") + m_scans[0].error});
  if (!c.data.val.empty() && !m_scans[1].error.isEmpty())
    out.append({QStringLiteral("data.val"), QStringLiteral("data.val: ") + m_scans[1].error});
  return out;
}

void DataPage::setPrepareInputs(const QStringList& inputs, const QString& tokenizer, const QString& outDir) {
  m_inputs->setText(inputs.join(QStringLiteral("; ")));
  m_tokenizer->setText(tokenizer);
  m_outDir->setText(outDir);
  if (!tokenizer.isEmpty()) {
    m_tokSourceChosen = true;
    setTokenizerSource(TokenizerSource::File);
  }
}

void DataPage::startPrepare() {
  if (isPreparing()) return;
  m_prepareAgain->stop();  // this preparation is the one a pending change asked for
  PrepareRequest request;
  request.inputs = splitInputs(m_inputs->text());
  request.source = tokenizerSource();
  request.tokenizer = request.source == TokenizerSource::Model
                          ? QString::fromStdString(modelFolderOf(draft()->config().model.init_from))
                          : m_tokenizer->text().trimmed();
  request.trainVocab = m_trainVocab->value();
  request.chatFormat = m_chatFormat->currentData().toString();
  request.pack = m_pack->isChecked();
  request.seqLen = draft()->config().train.seq_len;
  request.outDir = m_outDir->text().trimmed();
  if (validation() == ValidationBatch) request.valRows = batchRows();
  if (validation() == ValidationShare) request.valFraction = m_valPercent->value() / 100.0;
  if (request.inputs.isEmpty() || request.outDir.isEmpty() ||
      (request.source != TokenizerSource::Train && request.tokenizer.isEmpty())) {
    m_prepareMessage = tr("Choose the input files, a tokenizer and an output folder.");
    recheck();
    return;
  }
  if (request.source == TokenizerSource::Model &&
      !flotilla::interop::is_hf_folder(request.tokenizer.toStdString())) {
    m_prepareMessage = tr("The model does not come from a Hugging Face folder: choose a tokenizer.");
    recheck();
    return;
  }
  m_prepareMessage = request.source == TokenizerSource::Train
                         ? tr("Training a %1-token tokenizer, then tokenizing %n file(s)…", nullptr,
                              static_cast<int>(request.inputs.size()))
                               .arg(QLocale().toString(request.trainVocab))
                         : tr("Tokenizing %n file(s)…", nullptr, static_cast<int>(request.inputs.size()));
  m_prepared = false;
  m_preparing = true;
  m_prepareWatcher.setFuture(QtConcurrent::run([request] { return runPrepare(request); }));
  updateVisibility();
  recheck();
}

void DataPage::onPrepared() {
  m_summary = m_prepareWatcher.result();
  m_preparing = false;
  if (!m_summary.ok) {
    m_prepareMessage = tr("Preparing failed: %1").arg(m_summary.error);
    updateVisibility();
    // The folder's old shards were replaced or half written: the config no longer points at them.
    draft()->edit([&](RunConfig& c) { applyChoice(c); });
    recheck();
    return;
  }
  const flotilla::PrepareResult& r = m_summary.result;
  const QString trainGlob = QDir(m_summary.outDir).filePath(QStringLiteral("train_*.bin"));
  const QString valGlob =
      r.val_tokens > 0 ? QDir(m_summary.outDir).filePath(QStringLiteral("val_*.bin")) : QString();
  m_prepareMessage = describePrepared(m_summary).join(QLatin1Char('\n'));
  m_prepared = true;
  m_preparedTrain = trainGlob;
  m_preparedVal = valGlob;
  const int vocab = m_summary.tokenizerVocab;
  draft()->edit([&](RunConfig& c) {
    applyChoice(c);
    // The model must cover every id the tokenizer produces; a Hugging Face model keeps its own
    // vocabulary (extraProblems() reports a tokenizer larger than it).
    if (vocab > 0 && !flotilla::interop::is_hf_folder(modelFolderOf(c.model.init_from)))
      c.model.vocab_size = vocab;
  });
  reload();
}

}  // namespace flotilla::ui
