// Add or edit an SSH node: name, host, port, user, key file, price, spot, labels, and its idle
// autostop (idle limit, stop and start commands as argument lists, one argument per line).
//
// Decision: the dialog returns a plain runs::NodeFields (text as typed) and validates it with
// runs::validate_node_fields, the same check as `flotilla nodes add`; each problem is shown
// under its own field, live once a field was edited and for every field after OK. OK with any
// problem (or a name another node has) keeps the dialog open: nothing hostile leaves it. The
// autostop settings come back as a plain runs::PowerFields checked by runs::validate_power_fields
// (the rules of `flotilla nodes autostop`); each line of a command box is one argument, verbatim.
#pragma once

#include <QDialog>
#include <QHash>
#include <QStringList>

#include "runs/node_admin.h"
#include "runs/power_settings.h"
#include "ui/common/checkedform.h"

class QCheckBox;
class QLabel;
class QLineEdit;

namespace flotilla::ui {

class NodeDialog : public QDialog {
  Q_OBJECT

 public:
  // `taken`: names of other nodes (refused for this one). `initial`: the node being edited.
  // `initialPower`: the node's autostop settings, when it has any.
  NodeDialog(const QStringList& taken, const runs::NodeFields* initial = nullptr,
             QWidget* parent = nullptr, const runs::PowerFields* initialPower = nullptr);

  runs::NodeFields fields() const;
  runs::PowerFields power() const;
  // The field editors ("name", "host", "port", "user", "key", "price", "labels", "idle"; the
  // command boxes "stopCmd", "startCmd" through form()) and the problem label under each ("" when
  // fine); for tests.
  QLineEdit* editor(const QString& field) const { return m_form.edit(field); }
  QLabel* problemLabel(const QString& field) const { return m_form.problem(field); }
  QCheckBox* spotBox() const { return m_spot; }
  CheckedForm& form() { return m_form; }

  void accept() override;

 private:
  QHash<QString, QStringList> problems() const;  // by field key
  // Shows the problems of the touched fields (of all after OK); returns how many there are.
  int revalidate();

  QStringList m_taken;
  QCheckBox* m_spot;
  CheckedForm m_form;
};

}  // namespace flotilla::ui
