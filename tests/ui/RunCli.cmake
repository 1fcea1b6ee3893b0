# Runs COMMAND (a ;-list) with no display reachable (DISPLAY, WAYLAND_DISPLAY and
# QT_QPA_PLATFORM removed) and checks its exit code (EXPECT_RC) and that stderr contains
# EXPECT_STDERR. Usage: cmake -DCOMMAND=... -DEXPECT_RC=N -DEXPECT_STDERR=text -P RunCli.cmake
execute_process(COMMAND env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}\nstdout: ${out}\nstderr: ${err}")
endif()
string(FIND "${err}" "${EXPECT_STDERR}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "stderr lacks '${EXPECT_STDERR}'\nstderr: ${err}")
endif()
message(STATUS "exit ${rc} with: ${err}")
