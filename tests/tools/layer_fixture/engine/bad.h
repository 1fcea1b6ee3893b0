// Fixture: breaks the layer rule on purpose (see tests/tools/CMakeLists.txt).
#include <QString>
