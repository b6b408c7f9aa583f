# cmake --install: static libraries, their headers under include/dtrain/ (as the source tree has them),
# the generated configuration headers, the programs, and a CMake package: find_package(dtrain), then
# link dtrain::ddp, dtrain::rendezvous, dtrain::trainer, ... (docs/CMAKE.md).
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

get_property(_libraries GLOBAL PROPERTY DTRAIN_INSTALLED_LIBRARIES)
get_property(_system GLOBAL PROPERTY DTRAIN_SYSTEM_TARGETS)
install(TARGETS ${_libraries} ${_system} EXPORT dtrainTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY "${DTRAIN_GENERATED_INCLUDE}/third_party"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/dtrain")
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/dtrain")

# The package finds the same libraries this build found; those that were missing stay missing.
set(DTRAIN_FOUND_OPTIONAL)
foreach(_pkg Gloo GTest benchmark prometheus-cpp nlohmann_json ZLIB JPEG PNG)
  if(${_pkg}_FOUND)
    list(APPEND DTRAIN_FOUND_OPTIONAL ${_pkg})
  endif()
endforeach()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/dtrainConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/dtrainConfig.cmake" INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/dtrain")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/dtrainConfig.cmake" "${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/dtrain")
