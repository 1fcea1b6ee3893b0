// Fixture: the headless commands include the widget layer on purpose (see tests/tools/CMakeLists.txt).
#include "ui/runs/localrun.h"
