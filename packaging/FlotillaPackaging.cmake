# Packaging: desktop integration files and a CPack Debian package of the installed tree.
# Include from the top-level CMakeLists.txt after add_subdirectory(app):
#   include(packaging/FlotillaPackaging.cmake)
# then `cmake --build build && (cd build && cpack)` writes flotilla_<version>_<arch>.deb.
# Decision: the package depends on what dpkg-shlibdeps finds in the binaries (Qt, QCustomPlot,
# libssh, SQLite, OpenBLAS), not on a hand-kept list that drifts from the build.
include(GNUInstallDirs)

if(FLOTILLA_GUI)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/flotilla.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${CMAKE_SOURCE_DIR}/resources/icons/flotilla.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
  # What Help > Flotilla documentation (F1) opens: share/doc/flotilla/README.md.
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/flotilla
          PATTERN "screenshots" EXCLUDE)
endif()

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "flotilla")
set(CPACK_PACKAGE_VENDOR "Flotilla")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "Flotilla configures, trains, watches and compares language-model runs on local GPUs or SSH nodes, "
  "with its own C++ training engine (flotilla-worker).")
set(CPACK_PACKAGE_CONTACT "Flotilla maintainers <maintainers@flotilla.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(FLOTILLA_GUI)
  # The platform plugins (xcb, wayland) are loaded with dlopen, so shlibdeps cannot see them.
  # The SVG image and icon plugins come with libqt6svg6, which shlibdeps already pulls in.
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "qt6-qpa-plugins")
else()
  set(CPACK_PACKAGE_NAME "flotilla-worker")
endif()
include(CPack)
