# End to end through the headless `flotilla` commands, with no display: `run` a tiny config into a
# fresh --db, then `runs list --json`, `runs export --csv` (every step present), `runs show`,
# a second run, `compare --csv`, `costs --json`, `runs resume` of a completed run (refused, 9),
# `runs delete`, and an unknown run (4). Usage: cmake -DFLOTILLA=... -DCONFIG=... -DWORK=... -P RunStoreCli.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(db ${WORK}/store.db)
set(env env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM OMP_NUM_THREADS=1)

function(flot expect_rc)
  execute_process(COMMAND ${env} ${FLOTILLA} --db ${db} ${ARGN} WORKING_DIRECTORY ${WORK}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "flotilla ${ARGN}: exit ${rc}, expected ${expect_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

flot(0 run ${CONFIG} --name e2e)
if(NOT out MATCHES "step 6/6" OR NOT out MATCHES "run e2e completed: 6 steps")
  message(FATAL_ERROR "run printed no progress:\n${out}")
endif()

flot(0 runs list --json)
if(NOT out MATCHES "\"name\": \"e2e\"" OR NOT out MATCHES "\"status\": \"completed\"" OR NOT out MATCHES "\"last_step\": 6")
  message(FATAL_ERROR "runs list --json:\n${out}")
endif()

flot(0 runs export e2e --csv)
string(REGEX MATCHALL "\n[1-6],[0-9.]+," rows "${out}")
list(LENGTH rows n)
if(NOT out MATCHES "^step,time," OR NOT out MATCHES ",loss," OR NOT n EQUAL 6)
  message(FATAL_ERROR "runs export --csv: ${n} step rows\n${out}")
endif()
flot(0 runs export e2e --jsonl --metric val_loss)
string(REGEX MATCHALL "\"val_loss\":" evals "${out}")
list(LENGTH evals n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "runs export --jsonl --metric val_loss: ${n} evals\n${out}")
endif()

flot(0 runs show e2e)
if(NOT out MATCHES "status +completed \\(exit 0\\)" OR NOT out MATCHES "checkpoint step 6")
  message(FATAL_ERROR "runs show:\n${out}")
endif()

flot(0 run ${CONFIG} --name e2e-b --set train.steps=3 --quiet)
flot(0 compare e2e e2e-b --csv)
if(NOT out MATCHES "steps,6,3" OR NOT out MATCHES "config.train.steps,6,3")
  message(FATAL_ERROR "compare --csv:\n${out}")
endif()
flot(0 costs --json)
if(NOT out MATCHES "\"by_run\"")
  message(FATAL_ERROR "costs --json:\n${out}")
endif()
flot(9 runs resume e2e)
flot(2 run ${CONFIG} --name e2e)          # the name is taken: a usage error, nothing started
flot(0 runs delete e2e-b)
flot(4 runs show e2e-b)
if(NOT err MATCHES "no run named 'e2e-b'")
  message(FATAL_ERROR "unknown run: ${err}")
endif()
message(STATUS "run store CLI: ok")
