# The headless commands link no widget code (issue 16): flotilla-headless (flotilla_main.cpp over
# flotilla_cli, with no_window.cpp) loads no Qt library, and it runs a command with no display.
# Usage: cmake -DBINARY=... -DWORK=... -P HeadlessLinks.cmake
execute_process(COMMAND ldd ${BINARY} OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${BINARY} failed")
endif()
if(libs MATCHES "libQt6")
  message(FATAL_ERROR "the headless flotilla links Qt:\n${libs}")
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM ${BINARY} --db ${WORK}/store.db runs list
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "no runs in")
  message(FATAL_ERROR "flotilla-headless runs list: exit ${rc}\n${out}\n${err}")
endif()
message(STATUS "the headless flotilla links no Qt and runs its commands")
