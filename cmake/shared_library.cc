// libflatcake.so is libflatcake.a linked whole (cmake/FlatCakeInstall.cmake); CMake asks every
// library for a source of its own, and this is it.
