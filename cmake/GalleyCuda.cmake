# GalleyCuda.cmake: decide whether the CUDA backend is built.
#
# Out: GALLEY_HAVE_CUDA (0/1), GALLEY_CUDA_SOURCES (list of .cu), GALLEY_CUDA_REASON (text).
#
# The backend is built when GALLEY_CUDA is ON, this is not a sanitizer build, there is at
# least one src/backend/cuda/*.cu and a working nvcc is found (on PATH, $CUDACXX,
# -DCMAKE_CUDA_COMPILER=..., or /usr/local/cuda/bin/nvcc). Code for sm_80 and sm_90 plus
# compute_90 PTX; the CUDA runtime is linked statically (cudart_static).
file(GLOB GALLEY_CUDA_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/backend/cuda/*.cu")
set(GALLEY_HAVE_CUDA 0)

if(GALLEY_SANITIZE)
    set(GALLEY_CUDA_REASON "off in sanitizer builds")
elseif(NOT GALLEY_CUDA)
    set(GALLEY_CUDA_REASON "GALLEY_CUDA=OFF")
elseif(NOT GALLEY_CUDA_SOURCES)
    set(GALLEY_CUDA_REASON "no src/backend/cuda/*.cu sources")
else()
    # nvcc outside PATH: point check_language (which runs a sub-cmake) at the usual place.
    if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
        find_program(_galley_nvcc_on_path nvcc NO_CACHE)
        if(NOT _galley_nvcc_on_path AND EXISTS "/usr/local/cuda/bin/nvcc")
            set(ENV{CUDACXX} "/usr/local/cuda/bin/nvcc")
        endif()
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
            set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
        endif()
        set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
        if(NOT DEFINED CMAKE_CUDA_STANDARD)
            set(CMAKE_CUDA_STANDARD 17)
            set(CMAKE_CUDA_STANDARD_REQUIRED ON)
        endif()
        enable_language(CUDA)
        find_package(CUDAToolkit REQUIRED)
        set(GALLEY_HAVE_CUDA 1)
        set(GALLEY_CUDA_REASON "nvcc ${CMAKE_CUDA_COMPILER_VERSION} at ${CMAKE_CUDA_COMPILER}")
    else()
        set(GALLEY_CUDA_REASON "nvcc not found")
    endif()
endif()
message(STATUS "galley: CUDA backend ${GALLEY_HAVE_CUDA} (${GALLEY_CUDA_REASON})")
