# outbox_test_paths(TARGET SCOPE NAME PATH [NAME PATH ...]): in TARGET's sources the macro NAME is
# PATH as a std::string, written relative to this directory's binary folder (where the test's
# executable is) and resolved at run time by outbox_test::build_path()
# (tests/support/paths/outbox_test/build_paths.hpp). No absolute path reaches the compiler's
# command line, so the objects are the same in every checkout and ccache hits across clones.
# SCOPE is PRIVATE, or PUBLIC for a library whose executables live in this directory or in one
# at the same depth.
add_library(outbox_test_paths INTERFACE)
target_include_directories(outbox_test_paths INTERFACE ${CMAKE_CURRENT_LIST_DIR}/../tests/support/paths)
target_compile_options(outbox_test_paths INTERFACE -include outbox_test/build_paths.hpp)

function(outbox_test_paths target scope)
  target_link_libraries(${target} ${scope} outbox_test_paths)
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args name path)
    file(RELATIVE_PATH rel ${CMAKE_CURRENT_BINARY_DIR} ${path})
    if(rel STREQUAL "")
      set(rel ".")
    endif()
    target_compile_definitions(${target} ${scope} "${name}=::outbox_test::build_path(\"${rel}\")")
  endwhile()
endfunction()
