// Fixture: the runs layer includes Qt and the app on purpose.
#include <QObject>
#include "ui/main/mainwindow.h"
