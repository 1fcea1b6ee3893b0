// Fixture: a page decodes a run's kind from its stored target, on purpose.
#include <string>

std::string bad(const std::string& target) { return target.rfind("slurm:", 0) == 0 ? target.substr(6) : ""; }
