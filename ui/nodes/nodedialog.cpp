// Node add/edit dialog (see nodedialog.h).
#include "ui/nodes/nodedialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace flotilla::ui {
namespace {

// The validator's field names map onto the editors (labels share one editor).
QString editorFor(const std::string& field) {
  if (field == "label") return QStringLiteral("labels");
  return QString::fromStdString(field);
}

// The autostop checks' field names onto the editors.
QString powerEditorFor(const std::string& field) {
  if (field == "idle limit") return QStringLiteral("idle");
  if (field == "stop command") return QStringLiteral("stopCmd");
  return QStringLiteral("startCmd");
}

}  // namespace

NodeDialog::NodeDialog(const QStringList& taken, const runs::NodeFields* initial, QWidget* parent,
                       const runs::PowerFields* initialPower)
    : QDialog(parent),
      m_taken(taken),
      m_spot(new QCheckBox(tr("Spot instance (may be preempted)"), this)),
      m_form(this, [this] { revalidate(); }) {
  setObjectName(QStringLiteral("nodeDialog"));
  setWindowTitle(initial ? tr("Edit node") : tr("Add node"));
  QFormLayout* form = m_form.layout();
  auto* browse = new QPushButton(tr("Browse…"), this);
  m_form.addField(QStringLiteral("name"), tr("Name"), tr("e.g. lab-a100"));
  m_form.addField(QStringLiteral("host"), tr("Host"), tr("name or address, e.g. 10.0.0.5"));
  m_form.addField(QStringLiteral("port"), tr("Port"), QString());
  m_form.addField(QStringLiteral("user"), tr("User"), tr("empty: your user name or ~/.ssh/config"));
  m_form.addField(QStringLiteral("key"), tr("Key file"), tr("empty: ssh-agent, then ~/.ssh/id_*"), browse);
  m_form.addField(QStringLiteral("price"), tr("Price per hour"), tr("US dollars for the whole node, e.g. 2.50"));
  form->addRow(QString(), m_spot);
  m_form.addField(QStringLiteral("labels"), tr("Labels"), tr("comma separated, e.g. zone:eu, a100"));
  m_form.addField(QStringLiteral("idle"), tr("Stop when idle for"), tr("e.g. 30m, 2h; empty: never stopped by Flotilla"));
  m_form.addTextField(QStringLiteral("stopCmd"), tr("Stop command"),
                      tr("one argument per line, run on this machine without a shell, e.g.\ngcloud\ncompute\n"
                         "instances\nstop\nvm-1"));
  m_form.addTextField(QStringLiteral("startCmd"), tr("Start command"),
                      tr("one argument per line; empty: you start the node yourself"));
  m_form.edit(QStringLiteral("port"))->setText(QStringLiteral("22"));
  if (initialPower) {
    m_form.setInitialText(QStringLiteral("idle"), QString::fromStdString(initialPower->idle));
    m_form.setInitialText(QStringLiteral("stopCmd"), QString::fromStdString(runs::argv_to_lines(initialPower->stop_argv)));
    m_form.setInitialText(QStringLiteral("startCmd"),
                          QString::fromStdString(runs::argv_to_lines(initialPower->start_argv)));
  }

  if (initial) {
    m_form.edit(QStringLiteral("name"))->setText(QString::fromStdString(initial->name));
    m_form.edit(QStringLiteral("host"))->setText(QString::fromStdString(initial->host));
    m_form.edit(QStringLiteral("port"))->setText(QString::fromStdString(initial->port));
    m_form.edit(QStringLiteral("user"))->setText(QString::fromStdString(initial->user));
    m_form.edit(QStringLiteral("key"))->setText(QString::fromStdString(initial->key_path));
    m_form.edit(QStringLiteral("price"))->setText(QString::fromStdString(initial->price_per_hour));
    QStringList labels;
    for (const auto& l : initial->labels) labels << QString::fromStdString(l);
    m_form.edit(QStringLiteral("labels"))->setText(labels.join(QStringLiteral(", ")));
    m_spot->setChecked(initial->spot);
  }
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Private key file"), QString());
    if (!file.isEmpty()) m_form.setTouchedText(QStringLiteral("key"), file);
  });

  auto* note = new QLabel(tr("No password or passphrase is stored: Flotilla uses ssh-agent or the key file. "
                             "The node's host key is checked on first contact."),
                          this);
  note->setWordWrap(true);
  note->setForegroundRole(QPalette::PlaceholderText);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(initial ? tr("Save") : tr("Add node"));
  connect(buttons, &QDialogButtonBox::accepted, this, &NodeDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(note);
  layout->addWidget(buttons);
  setMinimumWidth(560);
}

runs::NodeFields NodeDialog::fields() const {
  runs::NodeFields f;
  const auto text = [this](const char* key) { return m_form.text(QLatin1String(key)); };
  f.name = text("name").trimmed().toStdString();
  f.host = text("host").trimmed().toStdString();
  f.port = text("port").trimmed().toStdString();
  f.user = text("user").trimmed().toStdString();
  f.key_path = text("key").toStdString();  // a path may legitimately end in a space
  f.price_per_hour = text("price").trimmed().toStdString();
  for (const QString& l : text("labels").split(QLatin1Char(','), Qt::SkipEmptyParts))
    if (!l.trimmed().isEmpty()) f.labels.push_back(l.trimmed().toStdString());
  f.spot = m_spot->isChecked();
  return f;
}

runs::PowerFields NodeDialog::power() const {
  runs::PowerFields p;
  p.idle = m_form.text(QStringLiteral("idle")).trimmed().toStdString();
  p.stop_argv = runs::argv_from_lines(m_form.text(QStringLiteral("stopCmd")).toStdString());
  p.start_argv = runs::argv_from_lines(m_form.text(QStringLiteral("startCmd")).toStdString());
  return p;
}

QHash<QString, QStringList> NodeDialog::problems() const {
  const runs::NodeFields f = fields();
  QHash<QString, QStringList> problems;
  for (const auto& p : runs::validate_power_fields(power()))
    problems[powerEditorFor(p.field)] << QString::fromStdString(p.message);
  for (const auto& p : runs::validate_node_fields(f))
    problems[editorFor(p.field)] << QString::fromStdString(p.message);
  if (m_taken.contains(QString::fromStdString(f.name)))
    problems[QStringLiteral("name")]
        << tr("name '%1' is taken by another node").arg(QString::fromStdString(f.name));
  return problems;
}

int NodeDialog::revalidate() { return m_form.show(problems()); }

void NodeDialog::accept() {
  if (m_form.acceptable(problems())) QDialog::accept();
}

}  // namespace flotilla::ui
