// Page title + explanation (see pageheader.h). Sizes derive from the application font so the
// header scales with the user's font settings.
#include "ui/common/pageheader.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

namespace flotilla::ui {

PageHeader::PageHeader(const QString& title, const QString& description, QWidget* parent)
    : QWidget(parent), m_title(new QLabel(title, this)), m_description(new QLabel(description, this)) {
  m_title->setObjectName(QStringLiteral("pageTitle"));
  QFont titleFont = m_title->font();
  titleFont.setPointSizeF(titleFont.pointSizeF() * 1.6);
  titleFont.setWeight(QFont::DemiBold);
  m_title->setFont(titleFont);

  m_description->setObjectName(QStringLiteral("pageDescription"));
  m_description->setWordWrap(true);
  m_description->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_description->setMaximumWidth(760);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(6);
  layout->addWidget(m_title);
  // In a row with a stretch, so its height is asked for at the width it gets (760 at most): in the
  // column alone its height was asked for at the page's whole width and a description that wraps
  // only when narrower was cut to half a line (issue 34 #19, the Costs page).
  auto* row = new QHBoxLayout;
  row->setContentsMargins(0, 0, 0, 0);
  row->addWidget(m_description, 1);
  row->addStretch(0);
  layout->addLayout(row);
}

QString PageHeader::title() const { return m_title->text(); }

}  // namespace flotilla::ui
