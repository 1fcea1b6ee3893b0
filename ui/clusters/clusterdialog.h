// Add a Slurm cluster: name, login node, port, user, key file, default partition and account.
//
// Decision: the dialog returns a plain runs::ClusterFields (text as typed) and validates it with
// runs::validate_cluster_fields, the same check as `flotilla clusters add`; each problem is shown
// under its own field, live once a field was edited and for every field after OK. OK with any
// problem (or a name another cluster has) keeps the dialog open. Storing goes through
// runs::add_cluster (the page does it off the UI thread), and the page's probe then checks the login
// node's host key as the Nodes page does: an unknown key is shown with its fingerprint to trust.
#pragma once

#include <QDialog>
#include <QHash>
#include <QStringList>

#include "runs/cluster_admin.h"
#include "ui/common/checkedform.h"

class QLabel;
class QLineEdit;

namespace flotilla::ui {

class ClusterDialog : public QDialog {
  Q_OBJECT

 public:
  // `taken`: names of the clusters already stored (refused for this one).
  explicit ClusterDialog(const QStringList& taken, QWidget* parent = nullptr);

  runs::ClusterFields fields() const;
  // The field editors ("name", "login", "port", "user", "key", "partition", "account") and the
  // problem label under each; for tests.
  QLineEdit* editor(const QString& field) const { return m_form.edit(field); }
  QLabel* problemLabel(const QString& field) const { return m_form.problem(field); }

  void accept() override;

 private:
  QHash<QString, QStringList> problems() const;  // by field key
  // Shows the problems of the touched fields (of all after OK); returns how many there are.
  int revalidate();

  QStringList m_taken;
  CheckedForm m_form;
};

}  // namespace flotilla::ui
