// cudasim: the runtime API header some host files include directly.
#pragma once
#include <cuda_runtime.h>
