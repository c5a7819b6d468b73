# flatcake_test(NAME LIBRARY src1.cc [src2.cc ...] [LABELS l1 l2] [TIMEOUT seconds])
# Builds a GoogleTest binary against LIBRARY (flatcake_store or flatcake_eval) and registers it
# with ctest.
function(flatcake_test name library)
  if(NOT FLATCAKE_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "LABELS" ${ARGN})
  add_executable(${name} ${ARG_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${library} GTest::gtest GTest::gtest_main
    PkgConfig::XXHASH)
  if(TARGET flatcake_test_pch)
    target_precompile_headers(${name} REUSE_FROM flatcake_test_pch)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(test_env "FLATCAKE_SHARED_DIR=${PROJECT_SOURCE_DIR}/../shared")
  if(FLATCAKE_SANITIZE MATCHES "address")
    # An allocation past ASan's limit returns null as malloc does, so that the tests of the
    # out-of-memory paths (aligned_buffer_test) test them rather than abort.
    list(APPEND test_env "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1")
  endif()
  if(FLATCAKE_SANITIZE MATCHES "undefined")
    list(APPEND test_env "UBSAN_OPTIONS=print_stacktrace=1")
  endif()
  if(FLATCAKE_SANITIZE MATCHES "thread")
    # UCX's memory hooks (libucm patches mmap and madvise at load) crash under ThreadSanitizer's
    # interceptors, in every test binary that links UCX, used or not.
    list(APPEND test_env "UCX_MEM_MMAP_HOOK_MODE=none")
    # Tests that ask for an impossible allocation expect null (a refused open), not an abort.
    list(APPEND test_env "TSAN_OPTIONS=halt_on_error=1:allocator_may_return_null=1")
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${test_env}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  # ctest -j starts these first: they take a minute or more (the fault campaign, the replay
  # against the simulator, the crash stress), and a fresh tree has no timings of its own yet.
  if(name IN_LIST FLATCAKE_LONG_TESTS)
    set_tests_properties(${name} PROPERTIES COST 100)
  endif()
endfunction()
set(FLATCAKE_LONG_TESTS torture_cmd_test simulator_test store_crash_stress_test
  cluster_process_test cluster_placement_test)

# flatcake_test_runs_cli(name_test ...): tests (those that exist: a tree may leave some out) that
# run the built `flatcake` as a child process. Built after it, told its path (FLATCAKE_BINARY),
# and given nlohmann_json to read what it prints with --json.
function(flatcake_test_runs_cli)
  foreach(name ${ARGN})
    if(TARGET ${name})
      add_dependencies(${name} flatcake_cli)
      target_compile_definitions(${name} PRIVATE FLATCAKE_BINARY="$<TARGET_FILE:flatcake_cli>")
      target_link_libraries(${name} PRIVATE nlohmann_json::nlohmann_json)
    endif()
  endforeach()
endfunction()

# flatcake_component([EXCLUDE file.cc ...] [CONCURRENT name_test ...]): adds every *.cc in the
# calling directory, except *_test.cc and the EXCLUDEd files, to the library of its component
# (flatcake_store for those in FLATCAKE_STORE_COMPONENTS, flatcake_eval for
# FLATCAKE_EVAL_COMPONENTS, flatcake_serve for FLATCAKE_SERVE_COMPONENTS); each *_test.cc becomes
# its own test binary linked against that library. Tests whose name ends in _stress_test get the
# label "stress"; a longer timeout applies to them. The CONCURRENT tests (names without .cc) get
# the label "concurrent": tests of code that threads share, which scripts/test.sh runs again under
# ThreadSanitizer with the stress tests.
function(flatcake_component)
  cmake_parse_arguments(ARG "" "" "EXCLUDE;CONCURRENT" ${ARGN})
  get_filename_component(component ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  if(component IN_LIST FLATCAKE_STORE_COMPONENTS)
    set(library flatcake_store)
  elseif(component IN_LIST FLATCAKE_EVAL_COMPONENTS)
    set(library flatcake_eval)
  elseif(component IN_LIST FLATCAKE_SERVE_COMPONENTS)
    set(library flatcake_serve)
  else()
    message(FATAL_ERROR "component '${component}' is in no library's list (CMakeLists.txt)")
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  if(tests)
    list(REMOVE_ITEM sources ${tests})
  endif()
  foreach(excluded ${ARG_EXCLUDE})
    list(REMOVE_ITEM sources ${CMAKE_CURRENT_SOURCE_DIR}/${excluded})
  endforeach()
  if(sources)
    target_sources(${library} PRIVATE ${sources})
  endif()
  foreach(test_src ${tests})
    get_filename_component(test_name ${test_src} NAME_WE)
    if(test_name MATCHES "_stress_test$")
      flatcake_test(${test_name} ${library} ${test_src} LABELS stress TIMEOUT 900)
    elseif(test_name IN_LIST ARG_CONCURRENT)
      flatcake_test(${test_name} ${library} ${test_src} LABELS concurrent)
    else()
      flatcake_test(${test_name} ${library} ${test_src})
    endif()
  endforeach()
  foreach(name ${ARG_CONCURRENT})
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${name}.cc)
      message(FATAL_ERROR "flatcake_component: CONCURRENT ${name}: no ${name}.cc here")
    endif()
  endforeach()
endfunction()
