# The worker starts everywhere (issue 21): flotilla-worker's ELF needs no CUDA, cuBLAS or NCCL
# library (readelf -d NEEDED entries), the CUDA plugin it loads at run time is the one that does,
# and with the plugin out of reach the worker still runs a CPU command, while a GPU run fails with
# exit code 3 and a message naming the missing file and the package that provides it.
# Usage: cmake -DWORKER=... -DPLUGIN=<path or empty> -DWORK=... -P WorkerNeedsNoCuda.cmake
execute_process(COMMAND readelf -d ${WORKER} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${WORKER} failed")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[([^]]+)\\]" needed "${dyn}")
if(NOT needed)
  message(FATAL_ERROR "no NEEDED entries read from ${WORKER}:\n${dyn}")
endif()
foreach(entry ${needed})
  if(entry MATCHES "libcuda|libcudart|libcublas|libnccl|libcudnn|libcudasim|flotilla-cuda")
    message(FATAL_ERROR "flotilla-worker links a CUDA library: ${entry}")
  endif()
endforeach()
if(PLUGIN)
  execute_process(COMMAND readelf -d ${PLUGIN} OUTPUT_VARIABLE pdyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT pdyn MATCHES "\\(NEEDED\\)")
    message(FATAL_ERROR "readelf -d ${PLUGIN} failed or shows no NEEDED entries")
  endif()
  if(REAL_CUDA AND NOT pdyn MATCHES "libcudart\\.so")
    message(FATAL_ERROR "the CUDA plugin ${PLUGIN} does not link libcudart:\n${pdyn}")
  endif()
endif()

# Without the plugin: a CPU command runs, a GPU run names what is missing.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{FLOTILLA_CUDA_PLUGIN} ${WORK}/absent/libflotilla-cuda.so)
execute_process(COMMAND ${WORKER} probe --no-peak RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Worker    ")
  message(FATAL_ERROR "probe without the CUDA plugin: exit ${rc}\n${out}\n${err}")
endif()
if(PLUGIN AND NOT out MATCHES "libflotilla-cuda.so is not installed")
  message(FATAL_ERROR "probe without the plugin does not say it is missing:\n${out}")
endif()
execute_process(COMMAND ${WORKER} train --config ${SOURCE}/resources/configs/demo.toml --set run.device=cuda
                        --set run.out_dir=${WORK}/run
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "a cuda run without the plugin should exit 3 (config), got ${rc}\n${out}\n${err}")
endif()
if(PLUGIN AND NOT err MATCHES "run.device = cuda: the CUDA plugin libflotilla-cuda.so is not installed .*flotilla-cuda package")
  message(FATAL_ERROR "a cuda run without the plugin does not name it and its package:\n${err}")
endif()
message(STATUS "flotilla-worker needs no CUDA library; without the plugin a GPU run says what is missing")
