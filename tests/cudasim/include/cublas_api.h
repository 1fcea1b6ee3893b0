// cudasim: cublasGetProperty, which the probe uses for the library version.
#pragma once
#include <cublasLt.h>
