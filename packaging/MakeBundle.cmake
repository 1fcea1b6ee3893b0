# The worker bundle: one relocatable archive with what `deploy` puts on a node (remote/deploy.h),
# for nodes and clusters without Debian packages.
#   flotilla-worker-<version>-linux-<arch>/
#     flotilla-worker        the wrapper deploy uploads (packaging/bundle/flotilla-worker.sh)
#     flotilla-worker.bin    the worker; RUNPATH $ORIGIN/lib, so it also runs without the wrapper
#     lib/<soname>           every library the worker, OpenBLAS (dlopen()ed) and the plugin need,
#                            except the C library family (packaging/bundle/system-libs.txt)
#     lib/flotilla/libflotilla-cuda.so   the CUDA plugin (CUDA, cuBLAS and NCCL come from the node)
#     share/doc/<package>/copyright      the licence of each bundled library, from its Debian package
#     MANIFEST               sha256sum of every file (deploy's completeness check)
# Decision: the libraries come from the build machine's Debian packages, so the bundle needs a
# glibc at least as new as the build machine's (deploy checks this against the node).
# Usage: cmake -DWORKER=... -DPLUGIN=... -DBLAS=... -DPATCHELF=... -DVERSION=... -DSOURCE=... -DOUT=...
#        -P MakeBundle.cmake     -> OUT/flotilla-worker-<version>-linux-<arch>.tar.gz (+ .sha256)
cmake_minimum_required(VERSION 3.25)
if(NOT PATCHELF)
  message(FATAL_ERROR "the worker bundle needs patchelf (apt-get install patchelf)")
endif()
execute_process(COMMAND uname -m OUTPUT_VARIABLE arch OUTPUT_STRIP_TRAILING_WHITESPACE)
set(name flotilla-worker-${VERSION}-linux-${arch})
set(root ${OUT}/${name})
file(REMOVE_RECURSE ${root} ${OUT}/${name}.tar.gz ${OUT}/${name}.tar.gz.sha256)
file(MAKE_DIRECTORY ${root}/lib/flotilla)

file(STRINGS ${SOURCE}/packaging/bundle/system-libs.txt system_libs REGEX "^[^#]")
set(exclude)
foreach(prefix ${system_libs})
  string(REPLACE "." "\\." prefix "${prefix}")
  list(APPEND exclude "^${prefix}")
endforeach()

# OpenBLAS is loaded with dlopen("libopenblas.so.0"): bundle the real file under that soname.
file(REAL_PATH ${BLAS} blas_real)
set(modules)
if(PLUGIN)
  list(APPEND modules MODULES ${PLUGIN})
endif()
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${WORKER}
  LIBRARIES ${blas_real}
  ${modules}
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  PRE_EXCLUDE_REGEXES ${exclude} "^libcuda\\." "^libcudart\\." "^libcublas" "^libnccl\\." "^libcudnn"
  POST_EXCLUDE_REGEXES "/ld-linux" "/libc\\.so" "/libm\\.so")
if(unresolved)
  message(FATAL_ERROR "the worker bundle: these libraries were not found on this machine: ${unresolved}")
endif()

function(add_file src dest mode)
  file(REAL_PATH ${src} real)
  get_filename_component(dir ${root}/${dest} DIRECTORY)
  file(COPY_FILE ${real} ${root}/${dest})
  file(CHMOD ${root}/${dest} PERMISSIONS ${mode})
endfunction()
set(exe_mode OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(lib_mode OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

add_file(${WORKER} flotilla-worker.bin "${exe_mode}")
add_file(${SOURCE}/packaging/bundle/flotilla-worker.sh flotilla-worker "${exe_mode}")
add_file(${blas_real} lib/libopenblas.so.0 "${lib_mode}")
set(bundled libopenblas.so.0)
set(sources ${blas_real})
foreach(lib ${resolved})
  get_filename_component(soname ${lib} NAME)
  if(soname MATCHES "^libopenblas")
    continue()
  endif()
  add_file(${lib} lib/${soname} "${lib_mode}")
  list(APPEND bundled ${soname})
  list(APPEND sources ${lib})
endforeach()
execute_process(COMMAND ${PATCHELF} --set-rpath "$ORIGIN/lib" ${root}/flotilla-worker.bin COMMAND_ERROR_IS_FATAL ANY)
foreach(soname ${bundled})
  execute_process(COMMAND ${PATCHELF} --set-rpath "$ORIGIN" ${root}/lib/${soname} COMMAND_ERROR_IS_FATAL ANY)
endforeach()
if(PLUGIN)
  add_file(${PLUGIN} lib/flotilla/libflotilla-cuda.so "${lib_mode}")
  # Its own libraries from lib/; CUDA from the node: NVIDIA's packages register theirs with ld.so,
  # a toolkit-only node has them under /usr/local/cuda.
  execute_process(COMMAND ${PATCHELF} --set-rpath "$ORIGIN/..:/usr/local/cuda/lib64"
                          ${root}/lib/flotilla/libflotilla-cuda.so COMMAND_ERROR_IS_FATAL ANY)
endif()

# Licences: the copyright file of the Debian package of each bundled library.
set(packages)
foreach(src ${sources})
  execute_process(COMMAND dpkg -S ${src} OUTPUT_VARIABLE owner RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    file(REAL_PATH ${src} real)
    execute_process(COMMAND dpkg -S ${real} OUTPUT_VARIABLE owner RESULT_VARIABLE rc ERROR_QUIET)
  endif()
  if(rc EQUAL 0)
    string(REGEX REPLACE ":.*" "" owner "${owner}")
    string(REGEX REPLACE ":[a-z0-9]+$" "" owner "${owner}")
    list(APPEND packages ${owner})
  endif()
endforeach()
list(REMOVE_DUPLICATES packages)
foreach(pkg ${packages})
  if(EXISTS /usr/share/doc/${pkg}/copyright)
    file(MAKE_DIRECTORY ${root}/share/doc/${pkg})
    file(COPY_FILE /usr/share/doc/${pkg}/copyright ${root}/share/doc/${pkg}/copyright)
  endif()
endforeach()
file(MAKE_DIRECTORY ${root}/share/doc/flotilla)
file(COPY_FILE ${SOURCE}/packaging/debian/copyright ${root}/share/doc/flotilla/copyright)

# MANIFEST last, in sha256sum format, relative to the bundle root (as deploy writes it).
file(GLOB_RECURSE files RELATIVE ${root} ${root}/*)
list(SORT files)
set(manifest "")
foreach(f ${files})
  file(SHA256 ${root}/${f} sum)
  string(APPEND manifest "${sum}  ${f}\n")
endforeach()
file(WRITE ${root}/MANIFEST "${manifest}")

execute_process(COMMAND tar --owner=0 --group=0 --numeric-owner --sort=name -czf ${name}.tar.gz ${name}
                WORKING_DIRECTORY ${OUT} COMMAND_ERROR_IS_FATAL ANY)
file(SHA256 ${OUT}/${name}.tar.gz sum)
file(WRITE ${OUT}/${name}.tar.gz.sha256 "${sum}  ${name}.tar.gz\n")
file(SIZE ${OUT}/${name}.tar.gz size)
list(LENGTH bundled nlibs)
message(STATUS "worker bundle: ${OUT}/${name}.tar.gz (${size} bytes, ${nlibs} libraries: ${bundled}); sha256 ${sum}")
