// Fixture: breaks the layer rule on purpose.
#include <libssh/libssh.h>
