// Fixture: a headless command reaches a node through remote/ instead of the runs service, on purpose.
#include "remote/session.h"
