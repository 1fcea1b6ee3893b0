// Node add/edit dialog (see nodedialog.h).
#include "ui/nodes/nodedialog.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
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

}  // namespace

NodeDialog::NodeDialog(const QStringList& taken, const runs::NodeFields* initial, QWidget* parent)
    : QDialog(parent), m_taken(taken), m_spot(new QCheckBox(tr("Spot instance (may be preempted)"), this)) {
  setObjectName(QStringLiteral("nodeDialog"));
  setWindowTitle(initial ? tr("Edit node") : tr("Add node"));
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
  addField(QStringLiteral("name"), tr("Name"), tr("e.g. lab-a100"));
  addField(QStringLiteral("host"), tr("Host"), tr("name or address, e.g. 10.0.0.5"));
  addField(QStringLiteral("port"), tr("Port"), QString());
  addField(QStringLiteral("user"), tr("User"), tr("empty: your user name or ~/.ssh/config"));
  addField(QStringLiteral("key"), tr("Key file"), tr("empty: ssh-agent, then ~/.ssh/id_*"), browse);
  addField(QStringLiteral("price"), tr("Price per hour"), tr("US dollars for the whole node, e.g. 2.50"));
  form->addRow(QString(), m_spot);
  addField(QStringLiteral("labels"), tr("Labels"), tr("comma separated, e.g. zone:eu, a100"));
  m_edits[QStringLiteral("port")]->setText(QStringLiteral("22"));

  if (initial) {
    m_edits[QStringLiteral("name")]->setText(QString::fromStdString(initial->name));
    m_edits[QStringLiteral("host")]->setText(QString::fromStdString(initial->host));
    m_edits[QStringLiteral("port")]->setText(QString::fromStdString(initial->port));
    m_edits[QStringLiteral("user")]->setText(QString::fromStdString(initial->user));
    m_edits[QStringLiteral("key")]->setText(QString::fromStdString(initial->key_path));
    m_edits[QStringLiteral("price")]->setText(QString::fromStdString(initial->price_per_hour));
    QStringList labels;
    for (const auto& l : initial->labels) labels << QString::fromStdString(l);
    m_edits[QStringLiteral("labels")]->setText(labels.join(QStringLiteral(", ")));
    m_spot->setChecked(initial->spot);
  }
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Private key file"), QString());
    if (file.isEmpty()) return;
    m_edits[QStringLiteral("key")]->setText(file);
    m_touched.insert(QStringLiteral("key"), true);
    revalidate();
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
  const auto text = [this](const char* key) { return m_edits.value(QLatin1String(key))->text(); };
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

int NodeDialog::revalidate() {
  const runs::NodeFields f = fields();
  QHash<QString, QStringList> problems;
  for (const auto& p : runs::validate_node_fields(f))
    problems[editorFor(p.field)] << QString::fromStdString(p.message);
  if (m_taken.contains(QString::fromStdString(f.name)))
    problems[QStringLiteral("name")]
        << tr("name '%1' is taken by another node").arg(QString::fromStdString(f.name));
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

void NodeDialog::accept() {
  m_showAll = true;
  if (revalidate() > 0) {
    for (const char* key : {"name", "host", "port", "user", "key", "price", "labels"})
      if (m_problems.value(QLatin1String(key))->isVisible()) {
        m_edits.value(QLatin1String(key))->setFocus();
        break;
      }
    return;
  }
  QDialog::accept();
}

}  // namespace flotilla::ui
