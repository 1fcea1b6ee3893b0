// "Add config…" on the Queue page: a TOML config file, the places it may run on (place keys,
// none: any place) and its optional limits (QueueOptions), turned into a QueueRequest.
//
// Decision: the dialog only collects; the page adds the entry (addToQueue) and shows the store's
// refusal or the config's parse error on its message line, so a refused add reads like every other
// refusal on the page. Tests fill the widgets through the page's answerAdd hook.
#pragma once

#include <QDialog>

#include "ui/queue/queuestore.h"

class QLineEdit;

namespace flotilla::ui {

class QueueOptions;

class AddQueueDialog : public QDialog {
  Q_OBJECT

 public:
  explicit AddQueueDialog(QWidget* parent = nullptr);

  QLineEdit* pathEdit() const { return m_path; }
  QLineEdit* placesEdit() const { return m_places; }
  QueueOptions* options() const { return m_options; }

  // The request as filled in (the file read now); false with *error for an unreadable file.
  bool request(QueueRequest* out, QString* error) const;

 private:
  QLineEdit* m_path;
  QLineEdit* m_places;
  QueueOptions* m_options;
};

}  // namespace flotilla::ui
