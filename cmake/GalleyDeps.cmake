# GalleyDeps.cmake: third-party libraries, as the INTERFACE target `galley_deps`.
#
# Static policy (tests/e2e/test_static_link.sh checks it on the built binary):
#   static (.a, full paths): libyaml; HDF5 (serial) + libsz + libaec + zlib;
#                            OpenBLAS (pthread) + libgfortran + libquadmath
#   dynamic:                 glibc (libm, libpthread, libdl, librt), Open MPI (libmpi.so),
#                            and in CUDA builds later cuBLAS/cuDNN/NCCL; cudart is static.
# Out: galley_deps (INTERFACE target), GALLEY_HAVE_MPI (0/1).
set(_galley_multiarch "")
if(CMAKE_LIBRARY_ARCHITECTURE)
    set(_galley_multiarch "${CMAKE_LIBRARY_ARCHITECTURE}")
endif()

# galley_find_static(VAR libfoo.a [HINTS dir...]) -> full path to the archive or FATAL_ERROR.
function(galley_find_static var file pkg)
    find_library(${var} NAMES "${file}" ${ARGN})
    if(NOT ${var})
        message(FATAL_ERROR "galley: static library ${file} not found "
                            "(Debian/Ubuntu: apt-get install ${pkg}; or ./build.sh installs it)")
    endif()
endfunction()

# galley_find_header(VAR header pkg [HINTS dir...]) -> include dir or FATAL_ERROR.
function(galley_find_header var header pkg)
    find_path(${var} NAMES "${header}" ${ARGN})
    if(NOT ${var})
        message(FATAL_ERROR "galley: header ${header} not found (apt-get install ${pkg})")
    endif()
endfunction()

# libyaml
galley_find_header(GALLEY_YAML_INCLUDE_DIR yaml.h libyaml-dev)
galley_find_static(GALLEY_YAML_LIB libyaml.a libyaml-dev)

# HDF5 (serial)
galley_find_header(GALLEY_HDF5_INCLUDE_DIR hdf5.h libhdf5-dev
    HINTS /usr/include/hdf5/serial PATH_SUFFIXES hdf5/serial)
galley_find_static(GALLEY_HDF5_LIB libhdf5.a libhdf5-dev
    HINTS "/usr/lib/${_galley_multiarch}/hdf5/serial" PATH_SUFFIXES hdf5/serial)
galley_find_static(GALLEY_SZ_LIB libsz.a libaec-dev)
galley_find_static(GALLEY_AEC_LIB libaec.a libaec-dev)
galley_find_static(GALLEY_Z_LIB libz.a zlib1g-dev)

# OpenBLAS, pthread flavour (headers and archive from the same flavour directory)
# The OpenMP build of OpenBLAS: its GEMM threads and galley's own OpenMP loops share one libgomp
# pool. With the pthread build both pools spin for the same cores, which made a 2-core run
# about 100x slower.
galley_find_header(GALLEY_OPENBLAS_INCLUDE_DIR cblas.h libopenblas-openmp-dev
    HINTS "/usr/include/${_galley_multiarch}/openblas-openmp" NO_DEFAULT_PATH)
galley_find_static(GALLEY_OPENBLAS_LIB libopenblas.a libopenblas-openmp-dev
    HINTS "/usr/lib/${_galley_multiarch}/openblas-openmp" NO_DEFAULT_PATH)

# OpenBLAS's LAPACK part is Fortran: its runtime comes from the compiler's directory.
function(galley_find_gcc_archive var file pkg)
    execute_process(COMMAND "${CMAKE_C_COMPILER}" "-print-file-name=${file}"
                    OUTPUT_VARIABLE _p OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_p AND IS_ABSOLUTE "${_p}" AND EXISTS "${_p}")
        set(${var} "${_p}" CACHE FILEPATH "Path to ${file}")
    else()
        galley_find_static(${var} "${file}" "${pkg}")
    endif()
endfunction()
galley_find_gcc_archive(GALLEY_GFORTRAN_LIB libgfortran.a gfortran)
galley_find_gcc_archive(GALLEY_QUADMATH_LIB libquadmath.a "libgcc-12-dev (gcc)")
# OpenMP for galley's own CPU kernels, linked statically so libgomp.so is not needed at run time.
galley_find_gcc_archive(GALLEY_GOMP_LIB libgomp.a "libgcc-12-dev (gcc)")

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

add_library(galley_deps INTERFACE)
target_include_directories(galley_deps SYSTEM INTERFACE
    "${GALLEY_YAML_INCLUDE_DIR}" "${GALLEY_HDF5_INCLUDE_DIR}" "${GALLEY_OPENBLAS_INCLUDE_DIR}")
# Order matters for static archives: users first, then what they need.
target_link_libraries(galley_deps INTERFACE
    "${GALLEY_YAML_LIB}"
    "${GALLEY_HDF5_LIB}" "${GALLEY_SZ_LIB}" "${GALLEY_AEC_LIB}" "${GALLEY_Z_LIB}"
    "${GALLEY_OPENBLAS_LIB}" "${GALLEY_GFORTRAN_LIB}" "${GALLEY_QUADMATH_LIB}"
    "${GALLEY_GOMP_LIB}"
    m Threads::Threads ${CMAKE_DL_LIBS} rt)
target_compile_options(galley_deps INTERFACE "$<$<COMPILE_LANGUAGE:C>:-fopenmp>")

# Open MPI, dynamic: pkg-config ompi-c, else `mpicc --showme:*`.
set(GALLEY_HAVE_MPI 0)
if(GALLEY_MPI)
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
        pkg_check_modules(GALLEY_OMPI QUIET IMPORTED_TARGET ompi-c)
    endif()
    if(GALLEY_OMPI_FOUND)
        target_link_libraries(galley_deps INTERFACE PkgConfig::GALLEY_OMPI)
        set(GALLEY_HAVE_MPI 1)
    else()
        find_program(GALLEY_MPICC mpicc)
        if(GALLEY_MPICC)
            execute_process(COMMAND "${GALLEY_MPICC}" --showme:incdirs
                            OUTPUT_VARIABLE _inc OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc1)
            execute_process(COMMAND "${GALLEY_MPICC}" --showme:link
                            OUTPUT_VARIABLE _link OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc2)
            if(_rc1 EQUAL 0 AND _rc2 EQUAL 0)
                separate_arguments(_inc UNIX_COMMAND "${_inc}")
                separate_arguments(_link UNIX_COMMAND "${_link}")
                target_include_directories(galley_deps SYSTEM INTERFACE ${_inc})
                target_link_libraries(galley_deps INTERFACE ${_link})
                set(GALLEY_HAVE_MPI 1)
            endif()
        endif()
    endif()
    if(NOT GALLEY_HAVE_MPI)
        message(FATAL_ERROR "galley: Open MPI not found (apt-get install libopenmpi-dev openmpi-bin), "
                            "or configure with -DGALLEY_MPI=OFF")
    endif()
endif()

# CUDA runtime, static (cudart_static needs libdl, librt, libpthread: already above).
if(GALLEY_HAVE_CUDA)
    target_link_libraries(galley_deps INTERFACE CUDA::cudart_static)
    # nvcc-compiled objects are C++: keep libstdc++ out of the binary's NEEDED list.
    target_link_options(galley_deps INTERFACE -static-libstdc++)
endif()
