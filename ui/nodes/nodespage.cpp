// Nodes page (see nodespage.h). The probe runs on the thread pool; this page only renders it.
#include "ui/nodes/nodespage.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

#include "ui/common/emptystate.h"
#include "ui/common/pageheader.h"
#include "ui/nodes/machinefacts.h"
#include "ui/nodes/machineprobe.h"

namespace flotilla::ui {

NodesPage::NodesPage(MachineProbe* probe, QWidget* parent)
    : QWidget(parent),
      m_probe(probe),
      m_facts(new QFormLayout),
      m_status(new QLabel(this)),
      m_refresh(new QPushButton(tr("Probe again"), this)) {
  auto* header = new PageHeader(
      tr("Nodes"),
      tr("The machines your runs can train on: this computer and remote nodes reached over SSH. For each, "
         "Flotilla reports processors, memory, GPUs, drivers and, while a run is going, live GPU "
         "utilisation, temperature and power."),
      this);

  auto* local = new QGroupBox(tr("This machine"), this);
  local->setObjectName(QStringLiteral("localMachine"));
  m_facts->setLabelAlignment(Qt::AlignLeft);
  m_facts->setHorizontalSpacing(24);
  m_facts->setVerticalSpacing(8);
  m_status->setObjectName(QStringLiteral("probeStatus"));
  m_status->setForegroundRole(QPalette::PlaceholderText);
  auto* statusRow = new QHBoxLayout;
  statusRow->addWidget(m_status, 1);
  statusRow->addWidget(m_refresh);
  auto* localLayout = new QVBoxLayout(local);
  localLayout->setContentsMargins(16, 16, 16, 12);
  localLayout->addLayout(m_facts);
  localLayout->addLayout(statusRow);

  auto* remote = new EmptyState(QStringLiteral("nodes"), tr("No remote nodes"),
                                tr("Add a machine you can reach with SSH (key or agent authentication) to "
                                   "train on it; Flotilla checks its host key and probes its GPUs."),
                                this);
  QPushButton* add = remote->addAction(tr("Add node…"));
  add->setEnabled(false);
  add->setToolTip(tr("Arrives with the SSH layer"));

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(28, 24, 28, 24);
  layout->setSpacing(16);
  layout->addWidget(header);
  layout->addWidget(local);
  layout->addWidget(remote, 1);

  connect(m_refresh, &QPushButton::clicked, this, [this] {
    m_probe->start();
    showProbe();
  });
  connect(m_probe, &MachineProbe::finished, this, &NodesPage::showProbe);
  showProbe();
}

void NodesPage::showProbe() {
  while (m_facts->rowCount() > 0) m_facts->removeRow(0);
  m_refresh->setEnabled(!m_probe->isRunning());
  if (m_probe->hasResult()) {
    for (const auto& [label, value] : machineFacts(m_probe->result())) {
      auto* valueLabel = new QLabel(value);
      valueLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
      valueLabel->setWordWrap(true);
      m_facts->addRow(label, valueLabel);
    }
  }
  if (m_probe->isRunning())
    m_status->setText(tr("Probing this machine…"));
  else if (!m_probe->error().isEmpty())
    m_status->setText(tr("The probe failed: %1").arg(m_probe->error()));
  else
    m_status->setText(m_probe->hasResult()
                          ? tr("Probed by the engine's machine probe (flotilla-worker probe).")
                          : QString());
}

QString NodesPage::localMachineText() const {
  QStringList lines;
  for (int row = 0; row < m_facts->rowCount(); ++row) {
    auto* label = qobject_cast<QLabel*>(m_facts->itemAt(row, QFormLayout::LabelRole)->widget());
    auto* value = qobject_cast<QLabel*>(m_facts->itemAt(row, QFormLayout::FieldRole)->widget());
    if (label && value) lines << label->text() + QStringLiteral(": ") + value->text();
  }
  lines << m_status->text();
  return lines.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
