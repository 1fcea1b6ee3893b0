// About box (see aboutdialog.h).
#include "ui/main/aboutdialog.h"

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "ui/common/icons.h"
#include "ui/nodes/machinefacts.h"
#include "ui/nodes/machineprobe.h"

namespace flotilla::ui {

AboutDialog::AboutDialog(const VersionInfo& versions, MachineProbe* probe, QWidget* parent)
    : QDialog(parent), m_versions(versions), m_probe(probe), m_text(new QLabel(this)) {
  setObjectName(QStringLiteral("aboutDialog"));
  setWindowTitle(tr("About Flotilla"));

  auto* icon = new QLabel(this);
  icon->setPixmap(appIcon().pixmap(64, 64));
  icon->setAlignment(Qt::AlignTop);

  auto* title = new QLabel(tr("Flotilla %1").arg(versions.flotilla), this);
  QFont font = title->font();
  font.setPointSizeF(font.pointSizeF() * 1.5);
  font.setWeight(QFont::DemiBold);
  title->setFont(font);
  auto* blurb = new QLabel(tr("A desktop control center for training large language models on your own GPUs "
                              "and SSH nodes, with its own C++ training engine."),
                           this);
  blurb->setWordWrap(true);

  m_text->setObjectName(QStringLiteral("aboutText"));
  m_text->setTextFormat(Qt::RichText);
  m_text->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_text->setWordWrap(true);  // long facts (a no-GPU reason, a BLAS config) wrap inside their cell

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

  auto* textColumn = new QVBoxLayout;
  textColumn->addWidget(title);
  textColumn->addWidget(blurb);
  textColumn->addSpacing(8);
  textColumn->addWidget(m_text);
  auto* row = new QHBoxLayout;
  row->setSpacing(20);
  row->addWidget(icon);
  row->addLayout(textColumn, 1);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(row);
  layout->addWidget(buttons);
  setMinimumWidth(600);

  if (m_probe) connect(m_probe, &MachineProbe::finished, this, &AboutDialog::refresh);
  refresh();
}

QString AboutDialog::versionsHtml(const VersionInfo& v, const MachineProbe* probe) {
  const QString probing = tr("probing…");
  QString blas = probing, cuda = probing;
  if (probe && probe->hasResult()) {
    const auto& p = probe->result();
    blas = p.blas_core.empty() ? QString::fromStdString(p.blas)
                               : QString::fromStdString(p.blas_core) + QStringLiteral(" (OpenBLAS kernel)");
    cuda = cudaStatus(p);
  } else if (probe && !probe->error().isEmpty()) {
    blas = cuda = tr("probe failed: %1").arg(probe->error());
  }
  QString qt = v.qtRuntime;
  if (v.qtBuild != v.qtRuntime) qt += tr(" (built with %1)").arg(v.qtBuild);
  const QList<QPair<QString, QString>> rows = {
      {tr("Flotilla"), v.flotilla},
      {tr("Qt"), qt},
      {tr("QCustomPlot"), v.qcustomplot},
      {tr("SQLite"), v.sqlite},
      {tr("libssh"), v.libssh},
      {tr("BLAS core"), blas},
      {tr("CUDA"), cuda},
      {tr("Compiler"), tr("%1 (%2 build)").arg(v.compiler, v.buildType)},
  };
  QString html = QStringLiteral("<table cellspacing='0' cellpadding='2'>");
  for (const auto& [name, value] : rows)
    html += QStringLiteral("<tr><td style='padding-right:16px'><b>%1</b></td><td>%2</td></tr>")
                .arg(name.toHtmlEscaped(), value.toHtmlEscaped());
  return html + QStringLiteral("</table>");
}

QString AboutDialog::text() const { return m_text->text(); }

void AboutDialog::refresh() { m_text->setText(versionsHtml(m_versions, m_probe)); }

}  // namespace flotilla::ui
