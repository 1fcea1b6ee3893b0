// Sidebar navigation (see sidebar.h).
#include "ui/main/sidebar.h"

#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QVBoxLayout>

#include "flotilla/build_info.h"
#include "ui/common/icons.h"

namespace flotilla::ui {

Sidebar::Sidebar(QWidget* parent) : QWidget(parent), m_list(new QListWidget(this)) {
  setObjectName(QStringLiteral("sidebar"));

  auto* logo = new QLabel(this);
  logo->setPixmap(appIcon().pixmap(32, 32));
  auto* name = new QLabel(tr("Flotilla"), this);
  QFont nameFont = name->font();
  nameFont.setPointSizeF(nameFont.pointSizeF() * 1.3);
  nameFont.setWeight(QFont::DemiBold);
  name->setFont(nameFont);
  auto* brand = new QHBoxLayout;
  brand->setContentsMargins(16, 16, 16, 16);
  brand->setSpacing(10);
  brand->addWidget(logo);
  brand->addWidget(name, 1);

  m_list->setObjectName(QStringLiteral("sidebarList"));
  m_list->setFrameShape(QFrame::NoFrame);
  m_list->setIconSize(QSize(20, 20));
  m_list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_list->setSelectionMode(QAbstractItemView::SingleSelection);
  m_list->setUniformItemSizes(true);
  applyListStyle();
  QFont listFont = m_list->font();
  listFont.setPointSizeF(listFont.pointSizeF() * 1.08);
  m_list->setFont(listFont);

  auto* version = new QLabel(tr("Version %1").arg(QStringLiteral(FLOTILLA_VERSION_STRING)), this);
  version->setForegroundRole(QPalette::PlaceholderText);
  version->setContentsMargins(16, 8, 16, 12);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addLayout(brand);
  layout->addWidget(m_list, 1);
  layout->addWidget(version);
  setFixedWidth(208);

  connect(m_list, &QListWidget::currentRowChanged, this, &Sidebar::currentIndexChanged);
}

void Sidebar::addPage(const QString& iconName, const QString& title) {
  auto* item = new QListWidgetItem(themedIcon(iconName, palette()), title, m_list);
  item->setSizeHint(QSize(0, 40));
  item->setToolTip(title);
  m_iconNames.append(iconName);
}

int Sidebar::count() const { return m_list->count(); }
int Sidebar::currentIndex() const { return m_list->currentRow(); }
void Sidebar::setCurrentIndex(int index) { m_list->setCurrentRow(index); }

QStringList Sidebar::titles() const {
  QStringList out;
  for (int i = 0; i < m_list->count(); ++i) out << m_list->item(i)->text();
  return out;
}

void Sidebar::applyListStyle() {
  // Inset, rounded rows in palette colours: the window colour shows through (navigation, not a
  // document) and every colour follows the active palette, light or dark. A style sheet resolves
  // palette(...) when it is set: it is set again on every palette change (a theme switch), or the
  // rows keep the old theme's text colour (near-black on the dark window, 1.1:1).
  m_list->setStyleSheet(QString());
  m_list->setStyleSheet(QStringLiteral(
      "QListWidget#sidebarList { background: transparent; border: none; outline: 0; }"
      "QListWidget#sidebarList::item { margin: 1px 10px; padding-left: 10px; border-radius: 6px;"
      "  color: palette(window-text); }"
      "QListWidget#sidebarList::item:hover:!selected { background: palette(midlight); }"
      "QListWidget#sidebarList::item:selected { background: palette(highlight);"
      "  color: palette(highlighted-text); }"));
}

void Sidebar::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange && !m_restyling) {
    m_restyling = true;  // setting the style sheet sends palette changes of its own
    applyListStyle();
    retintIcons();
    m_restyling = false;
  }
  QWidget::changeEvent(event);
}

void Sidebar::retintIcons() {
  for (int i = 0; i < m_list->count() && i < m_iconNames.size(); ++i)
    m_list->item(i)->setIcon(themedIcon(m_iconNames[i], palette()));
}

}  // namespace flotilla::ui
