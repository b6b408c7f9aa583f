# CMake counterparts of the Bazel rules the project uses, called from the generated targets.cmake.
#
# The build tree mirrors Bazel's: a rule's output lands at <build>/<package>/<name> (bazel-bin's
# layout), the files tests read are linked at the same paths, and tests run from <build> with the
# environment Bazel gives them (tools/cmake/run_test.sh), so a test's "$(location :train)" is the
# same relative path under both. A target whose dependencies (a system library, or a target left out
# before it) are missing is left out too, and the summary at the end of configuring says why.
include_guard(GLOBAL)

set(DTRAIN_TEST_RUNNER "${PROJECT_SOURCE_DIR}/tools/cmake/run_test.sh")

# Sets <missing> to the system libraries why any of the targets named is missing, and <stood_in> to
# those that the present ones (and what they link) have stand-ins for: the DTRAIN_STOOD_IN property
# every target carries.
function(_dtrain_dep_reasons missing stood_in)
  set(absent)
  set(replaced)
  foreach(dep IN LISTS ARGN)
    if(TARGET ${dep})
      get_property(why TARGET ${dep} PROPERTY DTRAIN_STOOD_IN)
      list(APPEND replaced ${why})
    else()
      get_property(why GLOBAL PROPERTY DTRAIN_MISSING_${dep})
      if(NOT why)
        message(FATAL_ERROR "dtrain: ${dep} is used before it is defined (regenerate with "
                            "tools/cmake/gen_cmake.py)")
      endif()
      list(APPEND absent ${why})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES absent)
  list(REMOVE_DUPLICATES replaced)
  set(${missing} "${absent}" PARENT_SCOPE)
  set(${stood_in} "${replaced}" PARENT_SCOPE)
endfunction()

# Records that <name> is left out because of the system libraries in <why>.
function(_dtrain_leave_out name why)
  set_property(GLOBAL PROPERTY DTRAIN_MISSING_${name} "${why}")
  foreach(w IN LISTS why)
    set_property(GLOBAL APPEND PROPERTY DTRAIN_LEFT_OUT_${w} ${name})
  endforeach()
endfunction()

# Leaves <name> out unless its dependencies exist; sets <skip> in the caller, and _stood_in to what
# its dependencies stand in for. Test code that links a stand-in is left out too: it may test the
# very thing the stand-in lacks.
macro(_dtrain_check name skip)
  set(${skip} FALSE)
  set(_stood_in)
  if(_arg_TESTONLY AND NOT BUILD_TESTING)
    set(${skip} TRUE)
    set_property(GLOBAL PROPERTY DTRAIN_MISSING_${name} "BUILD_TESTING=OFF")
  else()
    _dtrain_dep_reasons(_why _stood_in ${_arg_DEPS} ${_arg_DATA_TARGETS})
    if(_arg_TESTONLY)
      list(APPEND _why ${_stood_in})
      list(REMOVE_DUPLICATES _why)
    endif()
    if(_why)
      set(${skip} TRUE)
      _dtrain_leave_out(${name} "${_why}")
    endif()
  endif()
endmacro()

# Dependencies with alwayslink = True are linked whole, as Bazel does: their static registrations
# have no other reference that would keep them.
function(_dtrain_link name scope)
  foreach(dep IN LISTS ARGN)
    get_property(whole TARGET ${dep} PROPERTY DTRAIN_ALWAYSLINK)
    if(whole)
      target_link_libraries(${name} ${scope} "$<LINK_LIBRARY:WHOLE_ARCHIVE,${dep}>")
    else()
      target_link_libraries(${name} ${scope} ${dep})
    endif()
  endforeach()
endfunction()

# Links <build>/<path> to the source file at <path>, so tests find it where Bazel's runfiles have it.
function(dtrain_runfiles)
  foreach(path IN LISTS ARGN)
    set(link "${PROJECT_BINARY_DIR}/${path}")
    if(NOT IS_SYMLINK "${link}")
      get_filename_component(dir "${link}" DIRECTORY)
      file(MAKE_DIRECTORY "${dir}")
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${path}" "${link}" SYMBOLIC)
    endif()
  endforeach()
endfunction()

function(_dtrain_output name output)
  get_filename_component(dir "${output}" DIRECTORY)
  get_filename_component(base "${output}" NAME)
  set_target_properties(${name} PROPERTIES OUTPUT_NAME ${base}
                        RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/${dir}")
endfunction()

function(_dtrain_compile name)
  target_compile_features(${name} PRIVATE cxx_std_20)
  target_compile_options(${name} PRIVATE ${DTRAIN_WARNINGS})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}")
endfunction()

set(_dtrain_single EXPORT_NAME PACKAGE OUTPUT SCRIPT TIMEOUT STAND_IN)
set(_dtrain_multi SRCS HDRS DEPS LINKOPTS DATA DATA_TARGETS ARGS)

# STANDS_IN: this library is a stand-in (installed only where it replaces one).
# STAND_IN: the library to link instead when this one's system libraries are missing (a
# cmake_stand_in_for tag in the BUILD file): <name> then exists, with the stand-in's code, and
# carries the missing libraries in DTRAIN_STOOD_IN.
function(dtrain_cc_library name)
  cmake_parse_arguments(_arg "ALWAYSLINK;TESTONLY;STANDS_IN" "${_dtrain_single}" "${_dtrain_multi}"
                        ${ARGN})
  _dtrain_check(${name} skip)
  if(skip AND _arg_STAND_IN AND NOT _arg_TESTONLY AND TARGET "${_arg_STAND_IN}")
    get_property(why GLOBAL PROPERTY DTRAIN_MISSING_${name})
    set_property(GLOBAL PROPERTY DTRAIN_MISSING_${name})
    foreach(w IN LISTS why)
      get_property(left_out GLOBAL PROPERTY DTRAIN_LEFT_OUT_${w})
      list(REMOVE_ITEM left_out ${name})
      set_property(GLOBAL PROPERTY DTRAIN_LEFT_OUT_${w} ${left_out})
      set_property(GLOBAL APPEND PROPERTY DTRAIN_STOOD_IN_${w} ${name})
    endforeach()
    list(APPEND _stood_in ${why})
    set(_arg_SRCS)
    set(_arg_DEPS ${_arg_STAND_IN})
    # Installed only where it stands in: it defines the same symbols as the library it replaces.
    set_property(GLOBAL APPEND PROPERTY DTRAIN_INSTALLED_LIBRARIES ${_arg_STAND_IN})
    set(_arg_LINKOPTS)
    set(skip FALSE)
  endif()
  if(skip)
    return()
  endif()
  if(_arg_SRCS)
    add_library(${name} STATIC ${_arg_SRCS} ${_arg_HDRS})
    _dtrain_compile(${name})
    set(scope PUBLIC)
  else()
    add_library(${name} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(${name} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/dtrain>)
  _dtrain_link(${name} ${scope} ${_arg_DEPS})
  if(_arg_LINKOPTS)
    target_link_libraries(${name} ${scope} ${_arg_LINKOPTS})
  endif()
  set_target_properties(${name} PROPERTIES EXPORT_NAME ${_arg_EXPORT_NAME}
                        DTRAIN_ALWAYSLINK "${_arg_ALWAYSLINK}" DTRAIN_STOOD_IN "${_stood_in}")
  add_library(dtrain::${_arg_EXPORT_NAME} ALIAS ${name})
  if(NOT _arg_TESTONLY AND NOT _arg_STANDS_IN)
    set_property(GLOBAL APPEND PROPERTY DTRAIN_INSTALLED_LIBRARIES ${name})
    foreach(hdr IN LISTS _arg_HDRS)
      get_filename_component(dir "${hdr}" DIRECTORY)
      install(FILES "${hdr}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/dtrain/${dir}")
    endforeach()
  endif()
endfunction()

# The executable of a cc_binary or cc_test, from the caller's parsed arguments.
function(_dtrain_executable name)
  add_executable(${name} ${_arg_SRCS})
  _dtrain_compile(${name})
  _dtrain_output(${name} ${_arg_OUTPUT})
  _dtrain_link(${name} PRIVATE ${_arg_DEPS})
  if(_arg_LINKOPTS)
    target_link_libraries(${name} PRIVATE ${_arg_LINKOPTS})
  endif()
  if(_arg_DATA_TARGETS)
    add_dependencies(${name} ${_arg_DATA_TARGETS})
  endif()
  set_property(TARGET ${name} PROPERTY DTRAIN_STOOD_IN "${_stood_in}")
endfunction()

function(dtrain_cc_binary name)
  cmake_parse_arguments(_arg "TESTONLY" "${_dtrain_single}" "${_dtrain_multi}" ${ARGN})
  _dtrain_check(${name} skip)
  if(skip)
    return()
  endif()
  if(NOT _arg_SRCS)
    # A binary made of alwayslink libraries only (e.g. //trainer:train).
    set(_arg_SRCS "${PROJECT_SOURCE_DIR}/cmake/empty.cc")
  endif()
  _dtrain_executable(${name})
  dtrain_runfiles(${_arg_DATA})
  # The programs a user runs; benchmarks and examples stay in the build tree.
  if(NOT _arg_TESTONLY AND NOT _arg_OUTPUT MATCHES "^(bench|examples)/")
    install(TARGETS ${name} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
  endif()
endfunction()

function(_dtrain_add_test name)
  # The Bazel label as the test's name: ctest -R //dist/store: runs a package's tests.
  string(REGEX REPLACE "/([^/]+)$" ":\\1" label "//${_arg_OUTPUT}")
  add_test(NAME "${label}"
           COMMAND "${DTRAIN_TEST_RUNNER}" "${PROJECT_BINARY_DIR}" "${_arg_OUTPUT}" ${_arg_ARGS})
  set_tests_properties("${label}" PROPERTIES TIMEOUT ${_arg_TIMEOUT} SKIP_RETURN_CODE 77)
  if(_arg_RUN_SERIAL)
    set_tests_properties("${label}" PROPERTIES RUN_SERIAL TRUE)
  endif()
  dtrain_runfiles(${_arg_DATA})
endfunction()

function(dtrain_cc_test name)
  cmake_parse_arguments(_arg "RUN_SERIAL" "${_dtrain_single}" "${_dtrain_multi}" ${ARGN})
  set(_arg_TESTONLY TRUE)
  _dtrain_check(${name} skip)
  if(skip)
    return()
  endif()
  # The test's own sources at -O1, as in the Bazel build (.bazelrc says why).
  foreach(src IN LISTS _arg_SRCS)
    if(src MATCHES "_test\\.cc$")
      set_property(SOURCE "${src}" APPEND PROPERTY COMPILE_OPTIONS "$<$<CONFIG:Release>:-O1>")
    endif()
  endforeach()
  _dtrain_executable(${name})
  _dtrain_add_test(${name})
endfunction()

# A script as a target: <build>/<package>/<name> links to it, as bazel-bin has it.
function(_dtrain_script name)
  dtrain_runfiles(${_arg_SCRIPT})
  set(link "${PROJECT_BINARY_DIR}/${_arg_OUTPUT}")
  if(NOT IS_SYMLINK "${link}")
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${_arg_SCRIPT}" "${link}" SYMBOLIC)
  endif()
  add_custom_target(${name} ALL)
  set_property(TARGET ${name} PROPERTY DTRAIN_STOOD_IN "${_stood_in}")
  if(_arg_DATA_TARGETS)
    add_dependencies(${name} ${_arg_DATA_TARGETS})
  endif()
  dtrain_runfiles(${_arg_DATA})
endfunction()

function(dtrain_sh_binary name)
  cmake_parse_arguments(_arg "" "${_dtrain_single}" "${_dtrain_multi}" ${ARGN})
  _dtrain_check(${name} skip)
  if(NOT skip)
    _dtrain_script(${name})
  endif()
endfunction()

function(dtrain_sh_test name)
  cmake_parse_arguments(_arg "RUN_SERIAL" "${_dtrain_single}" "${_dtrain_multi}" ${ARGN})
  set(_arg_TESTONLY TRUE)
  _dtrain_check(${name} skip)
  if(skip)
    return()
  endif()
  _dtrain_script(${name})
  _dtrain_add_test(${name})
endfunction()

# What was left out and why, once every target is declared.
function(dtrain_summary)
  get_property(missing GLOBAL PROPERTY DTRAIN_MISSING_LIBRARIES)
  list(REMOVE_DUPLICATES missing)
  foreach(what IN LISTS missing)
    get_property(consequence GLOBAL PROPERTY DTRAIN_CONSEQUENCE_${what})
    get_property(left_out GLOBAL PROPERTY DTRAIN_LEFT_OUT_${what})
    list(LENGTH left_out n)
    list(JOIN left_out ", " names)
    string(REPLACE "dtrain_" "" names "${names}")
    get_property(stood_in GLOBAL PROPERTY DTRAIN_STOOD_IN_${what})
    set(instead "")
    if(stood_in)
      list(JOIN stood_in ", " instead)
      string(REPLACE "dtrain_" "" instead "${instead}")
      set(instead " Built with a stand-in: ${instead}.")
    endif()
    message(WARNING
      "dtrain: ${what} not found: ${consequence}.${instead} Left out (${n}): ${names}")
  endforeach()
endfunction()
