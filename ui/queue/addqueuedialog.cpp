// Add-config dialog (see addqueuedialog.h).
#include "ui/queue/addqueuedialog.h"

#include <QDialogButtonBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>

#include "ui/queue/queueoptions.h"

namespace flotilla::ui {

AddQueueDialog::AddQueueDialog(QWidget* parent)
    : QDialog(parent),
      m_path(new QLineEdit(this)),
      m_places(new QLineEdit(this)),
      m_options(new QueueOptions(this)) {
  setObjectName(QStringLiteral("addQueueDialog"));
  setWindowTitle(tr("Add a config to the queue"));
  m_path->setObjectName(QStringLiteral("queueConfigPath"));
  m_path->setPlaceholderText(tr("a run config (.toml)"));
  m_places->setObjectName(QStringLiteral("queuePlaces"));
  m_places->setPlaceholderText(tr("any place, or e.g. local node:b cluster:hpc/gpu"));
  m_places->setToolTip(
      tr("Place keys separated by spaces: local, node:NAME, nodes:A,B (several nodes, the "
         "master first), cluster:NAME or cluster:NAME/PARTITION. Empty: any place."));
  auto* browse = new QPushButton(tr("&Browse…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Run config"), m_path->text(),
                                                      tr("Run configs (*.toml);;All files (*)"));
    if (!file.isEmpty()) m_path->setText(file);
  });
  auto* pathRow = new QHBoxLayout;
  pathRow->addWidget(m_path, 1);
  pathRow->addWidget(browse);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Add to queue"));
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* form = new QFormLayout(this);
  form->addRow(tr("&Config"), pathRow);
  form->addRow(tr("&Places"), m_places);
  form->addRow(m_options);
  form->addRow(buttons);
}

bool AddQueueDialog::request(QueueRequest* out, QString* error) const {
  const QString path = m_path->text().trimmed();
  QFile file(path);
  if (path.isEmpty() || !file.open(QIODevice::ReadOnly)) {
    if (error)
      *error = path.isEmpty() ? tr("Choose a config file to queue.")
                              : tr("Cannot read %1: %2").arg(path, file.errorString());
    return false;
  }
  QueueRequest r;
  r.configToml = file.readAll().toStdString();
  r.configPath = QFileInfo(path).absoluteFilePath();
  r.places = m_places->text().split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts);
  r.priority = m_options->priority();
  r.deadline = m_options->deadline();
  r.maxUsd = m_options->maxUsd();
  *out = std::move(r);
  return true;
}

}  // namespace flotilla::ui
