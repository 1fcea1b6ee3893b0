# Fails when a layer includes a header from a layer above it (STYLE.md principle 1,
# docs/architecture.md): layers point one way, engine <- db, remote <- runs <- app/cli, ui <- app.
# - engine/, db/, remote/, runs/ and app/cli/ include no Qt or QCustomPlot; ui/ no libssh or CUDA;
# - engine/ includes no db/, remote/, runs/ or ui/; db/ and remote/ no runs/ or ui/ (nor each other);
# - runs/ includes no ui/ or app/; app/cli/ (the headless commands) never includes ui/;
# - SQL lives in db/ only: no other layer includes db/sql.h, names db::Stmt or writes a statement;
# - a run's status is written by the runs layer only: no db::set_status() in ui/ or app/;
# - the front ends (app/ and ui/) know runs only through the runs service: they include nothing from
#   remote/, create no run themselves (db::create_run), name no run-kind predicate and branch on no
#   place kind, and name none of the per-kind lifecycles (a local, node or Slurm watch, attach,
#   start or restart) nor the store's metrics offsets (the one watch loop reads the stream).
# Usage: cmake -DSOURCE_DIR=... -P LayerGuard.cmake
set(violations "")
# `regex` against the #include lines of every source file under `folder`.
function(scan folder regex what)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.hpp
       ${SOURCE_DIR}/${folder}/*.cpp ${SOURCE_DIR}/${folder}/*.cu ${SOURCE_DIR}/${folder}/*.cuh)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line ${lines})
      if(line MATCHES "${regex}")
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
        set(violations "${violations}\n  ${rel}: ${what}: ${line}" PARENT_SCOPE)
        set(violations "${violations}\n  ${rel}: ${what}: ${line}")
      endif()
    endforeach()
  endforeach()
endfunction()
# `regex` against every line (comments excluded) of every source file under `folder`.
function(scan_code folder regex what)
  file(GLOB_RECURSE files ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cpp)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "${regex}")
    # (A line with ';' comes back as several list items: report only the items that match.)
    foreach(line ${lines})
      if(line MATCHES "${regex}" AND NOT line MATCHES "^[ \t]*//")
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
        string(STRIP "${line}" shown)
        set(violations "${violations}\n  ${rel}: ${what}: ${shown}" PARENT_SCOPE)
        set(violations "${violations}\n  ${rel}: ${what}: ${shown}")
      endif()
    endforeach()
  endforeach()
endfunction()

set(QT_RE "#[ \t]*include[ \t]*[<\"](Q[A-Za-z]+|qcustomplot\\.h|Qt[A-Za-z]+/)")
scan(engine "${QT_RE}" "Qt header in engine/")
scan(db "${QT_RE}" "Qt header in db/")
scan(remote "${QT_RE}" "Qt header in remote/")
scan(runs "${QT_RE}" "Qt header in runs/")
scan(app/cli "${QT_RE}" "Qt header in app/cli/")
scan(ui "#[ \t]*include[ \t]*[<\"](libssh/|cuda|nccl|cublas|cudnn)" "libssh/CUDA header in ui/")
scan(engine "#[ \t]*include[ \t]*[<\"](db|remote|runs|ui)/" "engine/ includes an upper layer")
scan(db "#[ \t]*include[ \t]*[<\"](remote|runs|ui)/" "db/ includes an upper layer")
scan(remote "#[ \t]*include[ \t]*[<\"](db|runs|ui)/" "remote/ includes an upper layer")
scan(runs "#[ \t]*include[ \t]*[<\"](ui|app)/" "runs/ includes an upper layer")
scan(app/cli "#[ \t]*include[ \t]*[<\"]ui/" "app/cli/ includes ui/ (the headless commands link no widget code)")
# SQL only in db/.
set(SQL_RE "(#[ \t]*include[ \t]*[<\"]db/sql\\.h|db::Stmt|\"(SELECT|INSERT INTO|INSERT OR|UPDATE [a-z_]+ SET|DELETE FROM|CREATE TABLE|ALTER TABLE|PRAGMA) )")
foreach(layer ui app runs)
  scan_code(${layer} "${SQL_RE}" "SQL outside db/ (add a db/ function)")
endforeach()
# One place writes a run's status.
foreach(layer ui app)
  scan_code(${layer} "db::set_status[ \t]*\\(" "run status written outside the runs layer (runs/run_status.h)")
endforeach()
# The front ends know runs only through the runs service (issue 32): "where a run executes" is the
# runs layer's, so app/ and ui/ neither reach remote/ nor tell one kind of run from another.
foreach(layer ui app)
  scan(${layer} "#[ \t]*include[ \t]*[<\"]remote/"
       "front end includes remote/ (nodes and clusters are reached through runs/)")
  scan_code(${layer} "db::create_run[ \t]*\\(" "run created outside the runs layer (runs/service.h)")
endforeach()
# A whole word of the list, as C++ spells it (not part of a longer name).
function(words out)
  string(REPLACE ";" "|" alternatives "${ARGN}")
  set(${out} "(^|[^A-Za-z0-9_])(${alternatives})([^A-Za-z0-9_]|$)" PARENT_SCOPE)
endfunction()
# Run-kind predicates, a stored target decoded by its prefix, a branch on a placement's kind.
words(KIND_WORDS is_node_run_dir is_slurm_run is_local_run isNodeRunDir isSlurmRun isLocalRun)
set(PLACE_KIND_BRANCH "((case[ \t]+|[=!]=[ \t]*)[A-Za-z_:]*PlaceKind::|PlaceKind::k[A-Za-z]+[ \t]*[=!]=)")
set(TARGET_PREFIX "\"(slurm|ssh):")
# The per-kind lifecycles the service replaces, and the store's metrics offsets.
words(PER_KIND_WORDS LocalWatch LocalOutcome SlurmWatch runs::Watch runs::Node runs::Recovery watch_local_run
      watch_node_run watch_slurm_run supervise_node_run start_local_run create_local_run attach_local_run
      start_on_nodes restart_on_nodes connect_nodes attach_target attach_watch slurm_attach_target
      slurm_resume_target submit_slurm_run resubmit_slurm_run committed_offset)
foreach(layer ui app)
  scan_code(${layer} "${KIND_WORDS}|${PLACE_KIND_BRANCH}|${TARGET_PREFIX}"
            "run-kind branch in a front end (the runs service decides by the run's place)")
  scan_code(${layer} "${PER_KIND_WORDS}" "per-kind run lifecycle in a front end (use runs/service.h)")
endforeach()
if(violations)
  message(FATAL_ERROR "Layering violations (layers point one way: engine <- db, remote <- runs <- app/cli, ui <- app):${violations}")
endif()
message(STATUS "layer guard: engine/, db/, remote/, runs/, app/cli/, ui/ include only what their layer allows; SQL only in db/")
