# What `cmake --install <build> [--prefix P]` puts where (docs/install.md):
#   P/include/flatcake/*.h                    the public API
#   P/<libdir>/libflatcake.a, libflatcake.so  the store (flatcake_store), static and shared
#   P/<libdir>/flatcake/libflatcake_gpu_kernels.so   the GPU kernels, where built (dlopen'd)
#   P/<libdir>/cmake/FlatCake/                FlatCakeConfig.cmake, its version file, the targets:
#                                             find_package(FlatCake CONFIG) gives FlatCake::flatcake
#                                             (the shared library) and FlatCake::flatcake_static
#   P/<libdir>/pkgconfig/flatcake.pc          for pkg-config (--static for libflatcake.a)
#   P/bin/flatcake                            the tool and node daemon (`flatcake serve`)
#   P/share/flatcake/profiles/                the simulator's profiles (`flatcake simulate`)
#   P/lib/systemd/system/flatcake.service     the daemon's unit, its ExecStart naming P/bin
#   P/lib/sysusers.d/flatcake.conf            its system user
#   P/share/doc/flatcake/node.toml            the unit's example /etc/flatcake/node.toml
# The Python package is installed by pip (pyproject.toml), from the component `python` below,
# which a plain `cmake --install` leaves out.
include(CMakePackageConfigHelpers)

# libflatcake.so: every object of the static store library, linked whole.
add_library(flatcake_shared SHARED ${PROJECT_SOURCE_DIR}/cmake/shared_library.cc)
target_link_libraries(flatcake_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,flatcake_store>"
  PUBLIC Threads::Threads)
target_include_directories(flatcake_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(flatcake_shared PROPERTIES OUTPUT_NAME flatcake EXPORT_NAME flatcake_shared
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
# FlatCake::flatcake, what an integration links: the shared library and C++20 (the API uses it).
add_library(flatcake_api INTERFACE)
target_link_libraries(flatcake_api INTERFACE flatcake_shared)
target_compile_features(flatcake_api INTERFACE cxx_std_20)
set_target_properties(flatcake_api PROPERTIES EXPORT_NAME flatcake)
target_compile_features(flatcake_store INTERFACE cxx_std_20)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/flatcake
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel)
install(TARGETS flatcake_store flatcake_shared flatcake_api EXPORT FlatCakeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT devel)
install(TARGETS flatcake_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
if(TARGET flatcake_gpu_kernels)
  install(TARGETS flatcake_gpu_kernels
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/flatcake COMPONENT runtime)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiles/ DESTINATION ${CMAKE_INSTALL_DATADIR}/flatcake/profiles
  COMPONENT runtime FILES_MATCHING PATTERN "*.json")

# What libflatcake.a needs besides, by this build's parts: for pkg-config's Libs.private and the
# config file's comment.
set(FLATCAKE_PC_LIBS_PRIVATE "-lxxhash")
set(FLATCAKE_CONFIG_URING_NOTE "")
if(FLATCAKE_HAVE_URING)
  string(APPEND FLATCAKE_PC_LIBS_PRIVATE " -luring")
  set(FLATCAKE_CONFIG_URING_NOTE " and -luring")
endif()
string(APPEND FLATCAKE_PC_LIBS_PRIVATE " -ldl -pthread")

set(flatcake_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/FlatCake)
install(EXPORT FlatCakeTargets NAMESPACE FlatCake:: DESTINATION ${flatcake_cmake_dir}
  COMPONENT devel)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FlatCakeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/FlatCakeConfig.cmake INSTALL_DESTINATION ${flatcake_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/FlatCakeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/FlatCakeConfig.cmake
  ${PROJECT_BINARY_DIR}/FlatCakeConfigVersion.cmake DESTINATION ${flatcake_cmake_dir}
  COMPONENT devel)

# pkg-config, relocatable: the prefix is found from the .pc file's own folder, so that
# `cmake --install --prefix P` (a prefix chosen after configure) gives a right file.
file(RELATIVE_PATH FLATCAKE_PC_PREFIX_FROM_PCDIR ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
  ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/flatcake.pc.in ${PROJECT_BINARY_DIR}/flatcake.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flatcake.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT devel)

# The daemon's systemd unit, its binary's path made the installed one: written at install time,
# when the prefix (`--prefix`) is known.
set(flatcake_unit ${PROJECT_SOURCE_DIR}/packaging/systemd/flatcake.service)
set(unit_out ${PROJECT_BINARY_DIR}/packaging/flatcake.service)
install(CODE "
  file(READ \"${flatcake_unit}\" unit_text)
  string(REPLACE \"/usr/bin/flatcake\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/flatcake\"
    unit_text \"\${unit_text}\")
  file(WRITE \"${unit_out}\" \"\${unit_text}\")" COMPONENT service)
install(FILES ${unit_out} DESTINATION lib/systemd/system COMPONENT service)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/flatcake.sysusers
  DESTINATION lib/sysusers.d RENAME flatcake.conf COMPONENT service)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/node.toml
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT service)
