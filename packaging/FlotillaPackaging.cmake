# Packaging: Debian packages (CPack, one per component) and the relocatable worker bundle.
# Include from the top-level CMakeLists.txt after add_subdirectory(app):
#   include(packaging/FlotillaPackaging.cmake)
# then `cmake --build build && (cd build && cpack)` writes flotilla_<version>-1_<arch>.deb (the app
# and the CPU-ready worker; component "main") and, where the CUDA plugin is built,
# flotilla-cuda_<version>-1_<arch>.deb (lib/flotilla/libflotilla-cuda.so; component "cuda").
# `cmake --build build --target worker-bundle` writes the worker bundle (packaging/MakeBundle.cmake).
# Decisions: the main package depends on what dpkg-shlibdeps finds in the binaries, plus what is
# dlopen()ed (OpenBLAS, Qt's platform plugins); flotilla-cuda depends on NVIDIA's CUDA runtime,
# cuBLAS and NCCL packages by name (dpkg-shlibdeps knows no Debian package for them).
include(GNUInstallDirs)

set(FLOTILLA_DEB_RELEASE 1)
set(FLOTILLA_DEB_VERSION "${PROJECT_VERSION}-${FLOTILLA_DEB_RELEASE}")
if(FLOTILLA_GUI)
  set(FLOTILLA_MAIN_PACKAGE flotilla)
else()
  set(FLOTILLA_MAIN_PACKAGE flotilla-worker)
endif()

if(FLOTILLA_GUI)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/flotilla.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/icons/flotilla.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
  # What Help > Flotilla documentation (F1) opens: share/doc/flotilla/README.md.
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/flotilla
          PATTERN "screenshots" EXCLUDE)
endif()
# The pricing catalogue and the example configs are built into the binaries (db/costs.h,
# engine/cli/demo_config.h.in); these copies are the ones to read, copy and edit.
install(FILES ${CMAKE_SOURCE_DIR}/resources/pricing.toml DESTINATION ${CMAKE_INSTALL_DATADIR}/flotilla)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/resources/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/flotilla/configs
        FILES_MATCHING PATTERN "*.toml")
# The example evaluation tasks (docs/eval.md): small files made for the tests, to try `eval` on.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/resources/eval/ DESTINATION ${CMAKE_INSTALL_DATADIR}/flotilla/eval)

# Debian documentation: copyright and changelog.Debian.gz in each package's doc directory.
set(FLOTILLA_PKG_GEN ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${FLOTILLA_PKG_GEN})
find_program(FLOTILLA_GZIP gzip REQUIRED)
add_custom_command(OUTPUT ${FLOTILLA_PKG_GEN}/changelog.Debian.gz
  COMMAND ${FLOTILLA_GZIP} -9nc ${CMAKE_SOURCE_DIR}/packaging/debian/changelog > ${FLOTILLA_PKG_GEN}/changelog.Debian.gz
  DEPENDS ${CMAKE_SOURCE_DIR}/packaging/debian/changelog VERBATIM)
set(FLOTILLA_PKG_DOCS ${FLOTILLA_PKG_GEN}/changelog.Debian.gz)
set(FLOTILLA_DOC_PACKAGES ${FLOTILLA_MAIN_PACKAGE})
if(TARGET flotilla-cuda)
  list(APPEND FLOTILLA_DOC_PACKAGES flotilla-cuda)
endif()
foreach(pkg ${FLOTILLA_DOC_PACKAGES})
  set(component main)
  if(pkg STREQUAL "flotilla-cuda")
    set(component cuda)
  endif()
  install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/copyright ${FLOTILLA_PKG_GEN}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${pkg} COMPONENT ${component})
endforeach()

# Man pages generated from --help (help2man, Debian package help2man). Without help2man the
# packages are built without them (scripts/package-check installs it).
find_program(FLOTILLA_HELP2MAN help2man)
set(FLOTILLA_MAN_PAGES)
if(FLOTILLA_HELP2MAN)
  set(man_targets flotilla-worker)
  set(man_names "the Flotilla training engine")
  if(FLOTILLA_GUI)
    list(APPEND man_targets flotilla)
    list(APPEND man_names "desktop control center and commands for training language models")
  endif()
  foreach(target name IN ZIP_LISTS man_targets man_names)
    set(page ${FLOTILLA_PKG_GEN}/${target}.1)
    add_custom_command(OUTPUT ${page}.gz
      COMMAND ${CMAKE_COMMAND} -E env QT_QPA_PLATFORM=offscreen SOURCE_DATE_EPOCH=1796169600
              ${FLOTILLA_HELP2MAN} --no-info --name=${name} --output=${page} $<TARGET_FILE:${target}>
      COMMAND ${FLOTILLA_GZIP} -9nf ${page}
      DEPENDS ${target} VERBATIM)
    list(APPEND FLOTILLA_MAN_PAGES ${page}.gz)
  endforeach()
  install(FILES ${FLOTILLA_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: the packages will have no man pages (apt-get install help2man)")
endif()
add_custom_target(flotilla-package-docs ALL DEPENDS ${FLOTILLA_PKG_DOCS} ${FLOTILLA_MAN_PAGES})

# The worker bundle: bin/, lib/ (every non-glibc library the worker, OpenBLAS and the CUDA
# plugin need), lib/flotilla/ (the plugin), MANIFEST; tar.gz + .sha256 (packaging/MakeBundle.cmake).
find_program(FLOTILLA_PATCHELF patchelf)
list(GET BLAS_LIBRARIES 0 FLOTILLA_BUNDLE_BLAS)
add_custom_target(worker-bundle
  COMMAND ${CMAKE_COMMAND} -DWORKER=$<TARGET_FILE:flotilla-worker>
          "-DPLUGIN=$<$<TARGET_EXISTS:flotilla-cuda>:$<TARGET_FILE:flotilla-cuda>>"
          -DBLAS=${FLOTILLA_BUNDLE_BLAS} -DPATCHELF=${FLOTILLA_PATCHELF} -DVERSION=${PROJECT_VERSION}
          -DSOURCE=${CMAKE_SOURCE_DIR} -DOUT=${CMAKE_BINARY_DIR}/bundle
          -P ${CMAKE_SOURCE_DIR}/packaging/MakeBundle.cmake
  DEPENDS flotilla-worker VERBATIM)
if(TARGET flotilla-cuda)
  add_dependencies(worker-bundle flotilla-cuda)
endif()

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "${FLOTILLA_MAIN_PACKAGE}")
set(CPACK_PACKAGE_VENDOR "Flotilla")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
# The summary equals CPack's own default, which makes CPackDeb use each component description's
# first line as that package's synopsis (any other value is put before every description).
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
set(CPACK_PACKAGE_CONTACT "Flotilla maintainers <maintainers@flotilla.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL main)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${FLOTILLA_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_MAIN_PACKAGE_NAME "${FLOTILLA_MAIN_PACKAGE}")
set(CPACK_DEBIAN_MAIN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_MAIN_PACKAGE_SHLIBDEPS ON)
string(CONCAT CPACK_DEBIAN_MAIN_DESCRIPTION "${PROJECT_DESCRIPTION}\n"
  "Flotilla configures, trains, watches and compares language-model runs on\n"
  "this machine or on SSH nodes, with its own C++ training engine\n"
  "(flotilla-worker). This package trains on the CPU; install flotilla-cuda\n"
  "for NVIDIA GPUs.")
# OpenBLAS is dlopen()ed (engine/cpu/blas.h); the Qt platform plugins (xcb, wayland, offscreen)
# too. The SVG image and icon plugins come with libqt6svg6, which shlibdeps already pulls in.
# oneDNN (libdnnl.so.2, engine/cpu/onednn.h) is dlopen()ed only for CPU bf16 training, so it is
# recommended, not required: without it a bf16 CPU run is refused naming the package.
set(FLOTILLA_MAIN_DEPENDS "libopenblas0")
set(CPACK_DEBIAN_MAIN_PACKAGE_RECOMMENDS "libdnnl2")
if(FLOTILLA_GUI)
  string(APPEND FLOTILLA_MAIN_DEPENDS ", qt6-qpa-plugins")
  set(CPACK_DEBIAN_MAIN_PACKAGE_RECOMMENDS "libdnnl2, fonts-dejavu-core")
endif()
set(CPACK_DEBIAN_MAIN_PACKAGE_DEPENDS "${FLOTILLA_MAIN_DEPENDS}")
if(TARGET flotilla-cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME "flotilla-cuda")
  set(CPACK_DEBIAN_CUDA_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION "contrib/science")  # depends on NVIDIA's non-free packages
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  # NVIDIA's CUDA repository for Debian 12 names: cuda-cudart-<major>-<minor>, libcublas-<major>-<minor>
  # (cuBLAS and cuBLASLt), libnccl2. The driver (libcuda.so.1) comes from the system.
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS
      "${FLOTILLA_MAIN_PACKAGE} (= ${FLOTILLA_DEB_VERSION}), cuda-cudart-${FLOTILLA_CUDA_PACKAGE_SUFFIX}, libcublas-${FLOTILLA_CUDA_PACKAGE_SUFFIX}, libnccl2 (>= 2.28), libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1 (>= 3.0)")
  string(CONCAT CPACK_DEBIAN_CUDA_DESCRIPTION "NVIDIA GPU support for Flotilla\n"
    "The CUDA plugin of flotilla-worker (kernels, cuBLASLt matmuls and NCCL\n"
    "collectives). It needs the NVIDIA driver and NVIDIA's CUDA runtime,\n"
    "cuBLAS and NCCL packages from NVIDIA's CUDA repository for Debian 12.")
endif()
include(CPack)
