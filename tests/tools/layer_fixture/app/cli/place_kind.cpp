// Fixture: a command branches on where a run executes, on purpose.
#include "runs/placement.h"

int bad(const flotilla::runs::Placement& p) {
  switch (p.kind) {
    case flotilla::runs::PlaceKind::kSlurm:
      return 1;
    default:
      return 0;
  }
}
