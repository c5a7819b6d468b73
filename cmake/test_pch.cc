// The one source of flatcake_test_pch (CMakeLists.txt, FLATCAKE_PCH): the target exists to build
// the precompiled header that every test binary reuses, and CMake needs a source to build it with.
