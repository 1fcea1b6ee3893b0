// What the Nodes page knows about one node right now: reachability, host key, GPUs, latency.
#pragma once

#include <QMetaType>
#include <QString>
#include <vector>

#include "runs/node_ops.h"

namespace flotilla::ui {

enum class NodeState {
  Unknown,         // not probed yet (or the page was never shown)
  Reachable,       // connected, host key trusted, probe answered
  Unreachable,     // no connection, timeout, or the link dropped
  UnknownHostKey,  // the node's key is not in the workspace's known_hosts: ask the user
  HostKeyChanged,  // another key (or key type) is on record: refused before authentication
  AuthFailed,      // host key fine; no agent key or key file was accepted
};

struct NodeStatus {
  NodeState state = NodeState::Unknown;
  QString message;      // why (the library's full message; shown as a tooltip)
  QString fingerprint;  // SHA256:... the node presented (host key states and Reachable)
  double latencyMs = -1;
  bool probed = false;  // gpus is a fresh reading
  std::vector<runs::GpuInfo> gpus;
  QString gpuStatus;  // "ok" or why there are none
};

QString stateText(NodeState state);

}  // namespace flotilla::ui

Q_DECLARE_METATYPE(flotilla::ui::NodeStatus)
