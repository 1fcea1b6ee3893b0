// Data page (see datapage.h).
#include "ui/wizard/datapage.h"

#include <QButtonGroup>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>

#include "engine/data/prepare.h"
#include "engine/tokenizer/bpe.h"
#include "ui/wizard/configdraft.h"

namespace flotilla::ui {
namespace {

QStringList splitInputs(const QString& text) {
  QStringList out;
  for (const QString& part : text.split(QLatin1Char(';'), Qt::SkipEmptyParts))
    if (!part.trimmed().isEmpty()) out << part.trimmed();
  return out;
}

// A line edit with a "Choose…" button beside it.
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
    : WizardPageBase(configDraft, {QStringLiteral("data")}, parent),
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
      m_tokenizer(new QLineEdit(this)),
      m_outDir(new QLineEdit(this)),
      m_prepare(new QPushButton(tr("Prepare shards"), this)),
      m_prepareInfo(new QLabel(this)),
      m_scanDelay(new QTimer(this)) {
  setTitle(tr("Data"));
  setSubTitle(tr("What the model reads: a synthetic demo corpus, token shards you already have, or text "
                 "files to tokenize now."));
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

  m_inputs->setObjectName(QStringLiteral("prepareInputs"));
  m_tokenizer->setObjectName(QStringLiteral("prepareTokenizer"));
  m_outDir->setObjectName(QStringLiteral("prepareOut"));
  m_prepare->setObjectName(QStringLiteral("prepareButton"));
  m_prepareInfo->setObjectName(QStringLiteral("prepareInfo"));
  m_prepareInfo->setWordWrap(true);
  m_inputs->setPlaceholderText(tr("files separated by ';' (.txt: one document each; .jsonl: one per line)"));
  m_tokenizer->setPlaceholderText(tr("tokenizer JSON, or a folder with GPT-2's vocab.json + merges.txt"));
  auto* addInputs = new QPushButton(tr("Add…"), this);
  auto* chooseTok = new QPushButton(tr("Choose…"), this);
  auto* chooseOut = new QPushButton(tr("Folder…"), this);
  auto* prep = new QFormLayout(m_prepareBox);
  prep->addRow(tr("Input files"), withButton(m_inputs, addInputs, m_prepareBox));
  prep->addRow(tr("Tokenizer"), withButton(m_tokenizer, chooseTok, m_prepareBox));
  prep->addRow(tr("Output folder"), withButton(m_outDir, chooseOut, m_prepareBox));
  prep->addRow(m_prepare, m_prepareInfo);
  for (QWidget* box : boxes) box->setContentsMargins(24, 0, 0, 0);

  m_scanDelay->setSingleShot(true);
  m_scanDelay->setInterval(250);
  connect(m_scanDelay, &QTimer::timeout, this, &DataPage::startScan);
  connect(&m_scanWatcher, &QFutureWatcher<QList<ShardScan>>::finished, this, &DataPage::onScanned);
  connect(&m_prepareWatcher, &QFutureWatcher<Prepared>::finished, this, &DataPage::onPrepared);
  connect(m_modes, &QButtonGroup::idClicked, this, [this](int id) { setMode(static_cast<Mode>(id)); });
  connect(m_tokens, &QSpinBox::valueChanged, this, [this](int v) {
    if (!loading()) draft()->edit([&](RunConfig& c) { c.data.synthetic_tokens = v; });
  });
  connect(m_train, &QLineEdit::textEdited, this, [this](const QString& t) {
    draft()->edit([&](RunConfig& c) { c.data.train = shardPattern(t.trimmed(), QStringLiteral("train")).toStdString(); });
  });
  connect(m_val, &QLineEdit::textEdited, this, [this](const QString& t) {
    draft()->edit([&](RunConfig& c) { c.data.val = shardPattern(t.trimmed(), QStringLiteral("val")).toStdString(); });
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
    if (!files.isEmpty()) m_inputs->setText((splitInputs(m_inputs->text()) + files).join(QStringLiteral("; ")));
  });
  connect(chooseTok, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Tokenizer"), m_tokenizer->text());
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
  draft()->edit([&](RunConfig& c) { c.data.source = mode == Synthetic ? "synthetic" : "shards"; });
}

void DataPage::updateVisibility() {
  m_syntheticBox->setEnabled(m_mode == Synthetic);
  m_shardsBox->setEnabled(m_mode == Shards);
  m_prepareBox->setEnabled(m_mode == Prepare && !isPreparing());
}

void DataPage::load() {
  const RunConfig& c = draft()->config();
  if (c.data.source == "synthetic") m_mode = Synthetic;
  else if (m_mode == Synthetic) m_mode = Shards;
  if (QAbstractButton* b = m_modes->button(m_mode)) b->setChecked(true);
  m_tokens->setValue(static_cast<int>(std::min<int64_t>(c.data.synthetic_tokens, m_tokens->maximum())));
  m_train->setText(QString::fromStdString(c.data.train));
  m_val->setText(QString::fromStdString(c.data.val));
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
    m_trainInfo->setText(describeScan(m_scans[0]));
    m_valInfo->setText(val.isEmpty() ? tr("none: validation loss will not be measured") : describeScan(m_scans[1]));
  }
  m_prepareInfo->setText(m_prepareMessage);
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
  m_scanWatcher.setFuture(QtConcurrent::run([train, val] { return QList<ShardScan>{scanShards(train), scanShards(val)}; }));
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
  if (m_mode == Prepare) {
    if (isPreparing()) return {tr("Preparing the shards…")};
    if (!m_prepared) return {tr("Prepare the shards first: input files, a tokenizer and an output folder, then "
                                "Prepare shards.")};
  }
  if (c.data.source != "shards" || c.data.train.empty()) return {};
  if (m_scanPending || m_scans.size() != 2) return {tr("Reading the shards…")};
  QStringList out;
  if (!m_scans[0].error.isEmpty()) out << QStringLiteral("data.train: ") + m_scans[0].error;
  if (!c.data.val.empty() && !m_scans[1].error.isEmpty()) out << QStringLiteral("data.val: ") + m_scans[1].error;
  return out;
}

void DataPage::setPrepareInputs(const QStringList& inputs, const QString& tokenizer, const QString& outDir) {
  m_inputs->setText(inputs.join(QStringLiteral("; ")));
  m_tokenizer->setText(tokenizer);
  m_outDir->setText(outDir);
}

void DataPage::startPrepare() {
  if (isPreparing()) return;
  const QStringList inputs = splitInputs(m_inputs->text());
  const QString tok = m_tokenizer->text().trimmed(), out = m_outDir->text().trimmed();
  if (inputs.isEmpty() || tok.isEmpty() || out.isEmpty()) {
    m_prepareMessage = tr("Choose the input files, a tokenizer and an output folder.");
    recheck();
    return;
  }
  m_prepareMessage = tr("Tokenizing %n file(s)…", nullptr, static_cast<int>(inputs.size()));
  m_prepared = false;
  m_preparing = true;
  m_prepareWatcher.setFuture(QtConcurrent::run([inputs, tok, out]() -> Prepared {
    Prepared result;
    result.outDir = out;
    try {
      const flotilla::Tokenizer tokenizer = flotilla::Tokenizer::load(tok.toStdString());
      flotilla::PrepareOptions options;
      for (const QString& in : inputs) options.inputs.push_back(in.toStdString());
      options.out_dir = out.toStdString();
      options.force = true;
      const flotilla::PrepareResult r = flotilla::prepare_shards(tokenizer, options);
      result.ok = true;
      result.message = QStringLiteral("%1|%2|%3|%4")
                           .arg(r.documents)
                           .arg(r.train_tokens)
                           .arg(r.val_tokens)
                           .arg(tokenizer.vocab_size());
    } catch (const std::exception& e) {
      result.message = QString::fromUtf8(e.what());
    }
    return result;
  }));
  updateVisibility();
  recheck();
}

void DataPage::onPrepared() {
  const Prepared r = m_prepareWatcher.result();
  m_preparing = false;
  if (!r.ok) {
    m_prepareMessage = tr("Preparing failed: %1").arg(r.message);
    updateVisibility();
    recheck();
    return;
  }
  const QStringList f = r.message.split(QLatin1Char('|'));
  const int vocab = f.value(3).toInt();
  m_prepareMessage = tr("%1 documents: %2 train and %3 validation tokens in %4.")
                         .arg(f.value(0), f.value(1), f.value(2), r.outDir);
  m_prepared = true;
  const QString trainGlob = QDir(r.outDir).filePath(QStringLiteral("train_*.bin"));
  const QString valGlob = f.value(2).toLongLong() > 0 ? QDir(r.outDir).filePath(QStringLiteral("val_*.bin")) : QString();
  draft()->edit([&](RunConfig& c) {
    c.data.source = "shards";
    c.data.train = trainGlob.toStdString();
    c.data.val = valGlob.toStdString();
    // The model must cover every id the tokenizer produces.
    if (vocab > 0) c.model.vocab_size = vocab;
  });
  m_mode = Shards;
  reload();
}

}  // namespace flotilla::ui
