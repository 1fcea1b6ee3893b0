# Fails when a layer includes a header from a layer above it (STYLE.md principle 1,
# docs/architecture.md): layers point one way, engine <- db, remote <- runs <- app/cli, ui <- app.
# - engine/, db/, remote/, runs/ and app/cli/ include no Qt or QCustomPlot; ui/ no libssh or CUDA;
# - engine/ includes no db/, remote/, runs/ or ui/; db/ and remote/ no runs/ or ui/ (nor each other);
# - runs/ includes no ui/ or app/; app/cli/ (the headless commands) never includes ui/;
# - SQL lives in db/ only: no other layer includes db/sql.h, names db::Stmt or writes a statement;
# - a run's status is written by the runs layer only: no db::set_status() in ui/ or app/.
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
    foreach(line ${lines})
      if(NOT line MATCHES "^[ \t]*//")
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
if(violations)
  message(FATAL_ERROR "Layering violations (layers point one way: engine <- db, remote <- runs <- app/cli, ui <- app):${violations}")
endif()
message(STATUS "layer guard: engine/, db/, remote/, runs/, app/cli/, ui/ include only what their layer allows; SQL only in db/")
