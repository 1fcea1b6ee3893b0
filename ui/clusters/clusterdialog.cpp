// Add cluster dialog (see clusterdialog.h).
#include "ui/clusters/clusterdialog.h"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace flotilla::ui {

ClusterDialog::ClusterDialog(const QStringList& taken, QWidget* parent) : QDialog(parent), m_taken(taken) {
  setObjectName(QStringLiteral("clusterDialog"));
  setWindowTitle(tr("Add cluster"));
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
  const auto addField = [&](const QString& key, const QString& label, const QString& placeholder,
                            QWidget* extra = nullptr) {
    auto* edit = new QLineEdit(this);
    edit->setObjectName(key + QStringLiteral("Edit"));
    edit->setPlaceholderText(placeholder);
    auto* problem = new QLabel(this);
    problem->setObjectName(key + QStringLiteral("Problem"));
    problem->setWordWrap(true);
    QPalette pal = problem->palette();
    pal.setColor(QPalette::WindowText, QColor(0xd0, 0x45, 0x3a));
    problem->setPalette(pal);
    problem->hide();
    auto* column = new QVBoxLayout;
    column->setSpacing(2);
    if (extra) {
      auto* row = new QHBoxLayout;
      row->addWidget(edit, 1);
      row->addWidget(extra);
      column->addLayout(row);
    } else {
      column->addWidget(edit);
    }
    column->addWidget(problem);
    form->addRow(label, column);
    m_edits.insert(key, edit);
    m_problems.insert(key, problem);
    connect(edit, &QLineEdit::textEdited, this, [this, key] {
      m_touched.insert(key, true);
      revalidate();
    });
  };
  auto* browse = new QPushButton(tr("Browse…"), this);
  addField(QStringLiteral("name"), tr("Name"), tr("e.g. hpc"));
  addField(QStringLiteral("login"), tr("Login node"), tr("name or address, e.g. login.hpc.example.org"));
  addField(QStringLiteral("port"), tr("Port"), QString());
  addField(QStringLiteral("user"), tr("User"), tr("empty: your user name or ~/.ssh/config"));
  addField(QStringLiteral("key"), tr("Key file"), tr("empty: ssh-agent, then ~/.ssh/id_*"), browse);
  addField(QStringLiteral("partition"), tr("Partition"), tr("empty: the cluster's default"));
  addField(QStringLiteral("account"), tr("Account"), tr("empty: your default Slurm account"));
  m_edits[QStringLiteral("port")]->setText(QStringLiteral("22"));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Private key file"), QString());
    if (file.isEmpty()) return;
    m_edits[QStringLiteral("key")]->setText(file);
    m_touched.insert(QStringLiteral("key"), true);
    revalidate();
  });

  auto* note = new QLabel(tr("No password or passphrase is stored: Flotilla uses ssh-agent or the key file. "
                             "After adding, the cluster is probed: the login node's host key is shown for "
                             "you to trust on first contact, and its partitions and nodes are read."),
                          this);
  note->setWordWrap(true);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Add cluster"));
  connect(buttons, &QDialogButtonBox::accepted, this, &ClusterDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(note);
  layout->addWidget(buttons);
  setMinimumWidth(560);
}

runs::ClusterFields ClusterDialog::fields() const {
  runs::ClusterFields f;
  const auto text = [this](const char* key) { return m_edits.value(QLatin1String(key))->text(); };
  f.name = text("name").trimmed().toStdString();
  f.login = text("login").trimmed().toStdString();
  f.port = text("port").trimmed().toStdString();
  f.user = text("user").trimmed().toStdString();
  f.key_path = text("key").toStdString();  // a path may legitimately end in a space
  f.partition = text("partition").trimmed().toStdString();
  f.account = text("account").trimmed().toStdString();
  return f;
}

int ClusterDialog::revalidate() {
  const runs::ClusterFields f = fields();
  QHash<QString, QStringList> problems;
  for (const auto& p : runs::validate_cluster_fields(f))
    problems[QString::fromStdString(p.field)] << QString::fromStdString(p.message);
  if (m_taken.contains(QString::fromStdString(f.name)))
    problems[QStringLiteral("name")]
        << tr("name '%1' is taken by another cluster").arg(QString::fromStdString(f.name));
  int count = 0;
  for (auto it = m_problems.begin(); it != m_problems.end(); ++it) {
    const QStringList list = problems.value(it.key());
    count += static_cast<int>(list.size());
    const bool show = !list.isEmpty() && (m_showAll || m_touched.value(it.key()));
    it.value()->setText(show ? list.join(QLatin1Char('\n')) : QString());
    it.value()->setVisible(show);
  }
  return count;
}

void ClusterDialog::accept() {
  m_showAll = true;
  if (revalidate() > 0) {
    for (const char* key : {"name", "login", "port", "user", "key", "partition", "account"})
      if (m_problems.value(QLatin1String(key))->isVisible()) {
        m_edits.value(QLatin1String(key))->setFocus();
        break;
      }
    return;
  }
  QDialog::accept();
}

}  // namespace flotilla::ui
