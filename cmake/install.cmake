# `cmake --install`: the SDK (include/drover and its libraries, exported as drover::sdk with a
# DroverConfig.cmake, so that `find_package(Drover)` works) and the `drover` binary.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(drover_sdk_parts drover_common drover_router drover_sdk_core drover_sdk drover_jobs
                     drover_proto)
foreach(part ${drover_sdk_parts})
  string(REPLACE "drover_" "" export_name ${part})
  set_target_properties(${part} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
set_target_properties(drover_sdk PROPERTIES EXPORT_NAME host)
set_target_properties(drover_sdk_bundle PROPERTIES EXPORT_NAME sdk)

install(TARGETS drover_sdk_bundle ${drover_sdk_parts}
        EXPORT DroverTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/drover DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS drover RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(drover_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Drover)
install(EXPORT DroverTargets NAMESPACE drover:: DESTINATION ${drover_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/DroverConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/DroverConfig.cmake
                              INSTALL_DESTINATION ${drover_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/DroverConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/DroverConfig.cmake
              ${PROJECT_BINARY_DIR}/DroverConfigVersion.cmake
        DESTINATION ${drover_cmake_dir})
