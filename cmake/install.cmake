# gradflow as an installed library (docs/library.md). `cmake --install build --prefix P` writes
#   P/include/gradflow/gradflow.h and tensor/ autograd/ nn/ optim/ train/   the headers
#   P/include/gradflow/korean/                                                the built-in corpus's headers
#   P/lib/libgradflow.a, P/lib/libgradflow_korean.a                          the library, the built-in corpus
#   P/lib/cmake/gradflow/                                                     find_package(gradflow)
#   P/lib/pkgconfig/gradflow.pc, gradflow-korean.pc                           pkg-config gradflow (gradflow-korean)
# The labs (gradflow_lab), the CLI's subcommands (gradflow_app) and the tests are programs built on
# the library, not API, and stay out of the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The headers include each other as "nn/module.h", so a consumer has both include/ (for
# <gradflow/nn/linear.h>) and include/gradflow (for the headers' own includes) on its path.
target_include_directories(gradflow PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/gradflow>)
install(TARGETS gradflow gradflow_korean EXPORT gradflowTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir tensor autograd nn optim train korean)
  install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradflow FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES gradflow.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradflow)

set(GRADFLOW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradflow)
set(GRADFLOW_HAVE_MPI OFF)
if(MPI_CXX_FOUND)
  set(GRADFLOW_HAVE_MPI ON)
endif()
install(EXPORT gradflowTargets NAMESPACE gradflow:: DESTINATION ${GRADFLOW_CMAKE_DIR})
configure_package_config_file(cmake/gradflowConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/gradflowConfig.cmake
                              INSTALL_DESTINATION ${GRADFLOW_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gradflowConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gradflowConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/gradflowConfigVersion.cmake
        DESTINATION ${GRADFLOW_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own place, so the package can be installed
# with --prefix (or moved) after configuring.
file(RELATIVE_PATH GRADFLOW_PC_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" GRADFLOW_PC_PREFIX "${GRADFLOW_PC_PREFIX}")  # "../.."
set(GRADFLOW_PC_REQUIRES "tbb fmt nlohmann_json openblas sentencepiece")
set(GRADFLOW_PC_CFLAGS "")
# oneDNN (--precision bf16) and its OpenMP runtime ship no pkg-config file on Debian: named directly.
set(GRADFLOW_PC_LIBS " -ldnnl -lgomp")
if(GRADFLOW_HAVE_MPI)
  string(APPEND GRADFLOW_PC_REQUIRES " mpi-c")
  set(GRADFLOW_PC_CFLAGS " -DGRADFLOW_HAVE_MPI=1")
endif()
configure_file(cmake/gradflow.pc.in ${CMAKE_CURRENT_BINARY_DIR}/gradflow.pc @ONLY)
configure_file(cmake/gradflow-korean.pc.in ${CMAKE_CURRENT_BINARY_DIR}/gradflow-korean.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gradflow.pc ${CMAKE_CURRENT_BINARY_DIR}/gradflow-korean.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
