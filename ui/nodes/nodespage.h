// The Nodes page: the machines runs can use. "This machine" is probed for real (CPU, cores,
// memory, GPUs or why there is none); SSH nodes arrive with the remote layer.
#pragma once

#include <QWidget>

class QFormLayout;
class QLabel;
class QPushButton;

namespace flotilla::ui {

class MachineProbe;

class NodesPage : public QWidget {
  Q_OBJECT

 public:
  explicit NodesPage(MachineProbe* probe, QWidget* parent = nullptr);

  // The text of the "This machine" card, one "label: value" line per fact (tests read it).
  QString localMachineText() const;

 private:
  void showProbe();

  MachineProbe* m_probe;
  QFormLayout* m_facts;
  QLabel* m_status;
  QPushButton* m_refresh;
};

}  // namespace flotilla::ui
