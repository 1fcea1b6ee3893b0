// Fixture: a page includes the SSH layer instead of asking the runs layer, on purpose.
#include <remote/probe.h>
