// Add cluster dialog (see clusterdialog.h).
#include "ui/clusters/clusterdialog.h"

#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace flotilla::ui {

ClusterDialog::ClusterDialog(const QStringList& taken, QWidget* parent)
    : QDialog(parent), m_taken(taken), m_form(this, [this] { revalidate(); }) {
  setObjectName(QStringLiteral("clusterDialog"));
  setWindowTitle(tr("Add cluster"));
  auto* browse = new QPushButton(tr("Browse…"), this);
  m_form.addField(QStringLiteral("name"), tr("Name"), tr("e.g. hpc"));
  m_form.addField(QStringLiteral("login"), tr("Login node"), tr("name or address, e.g. login.hpc.example.org"));
  m_form.addField(QStringLiteral("port"), tr("Port"), QString());
  m_form.addField(QStringLiteral("user"), tr("User"), tr("empty: your user name or ~/.ssh/config"));
  m_form.addField(QStringLiteral("key"), tr("Key file"), tr("empty: ssh-agent, then ~/.ssh/id_*"), browse);
  m_form.addField(QStringLiteral("partition"), tr("Partition"), tr("empty: the cluster's default"));
  m_form.addField(QStringLiteral("account"), tr("Account"), tr("empty: your default Slurm account"));
  m_form.edit(QStringLiteral("port"))->setText(QStringLiteral("22"));
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Private key file"), QString());
    if (!file.isEmpty()) m_form.setTouchedText(QStringLiteral("key"), file);
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
  layout->addLayout(m_form.layout());
  layout->addWidget(note);
  layout->addWidget(buttons);
  setMinimumWidth(560);
}

runs::ClusterFields ClusterDialog::fields() const {
  runs::ClusterFields f;
  const auto text = [this](const char* key) { return m_form.text(QLatin1String(key)); };
  f.name = text("name").trimmed().toStdString();
  f.login = text("login").trimmed().toStdString();
  f.port = text("port").trimmed().toStdString();
  f.user = text("user").trimmed().toStdString();
  f.key_path = text("key").toStdString();  // a path may legitimately end in a space
  f.partition = text("partition").trimmed().toStdString();
  f.account = text("account").trimmed().toStdString();
  return f;
}

QHash<QString, QStringList> ClusterDialog::problems() const {
  const runs::ClusterFields f = fields();
  QHash<QString, QStringList> problems;
  for (const auto& p : runs::validate_cluster_fields(f))
    problems[QString::fromStdString(p.field)] << QString::fromStdString(p.message);
  if (m_taken.contains(QString::fromStdString(f.name)))
    problems[QStringLiteral("name")]
        << tr("name '%1' is taken by another cluster").arg(QString::fromStdString(f.name));
  return problems;
}

int ClusterDialog::revalidate() { return m_form.show(problems()); }

void ClusterDialog::accept() {
  if (m_form.acceptable(problems())) QDialog::accept();
}

}  // namespace flotilla::ui
