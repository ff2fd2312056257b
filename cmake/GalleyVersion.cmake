# GalleyVersion.cmake: GALLEY_VERSION_STRING = "<PROJECT_VERSION>-<git short hash|nogit>".
# (GALLEY_GIT_HASH, when given, is the hash.)
#
# The hash is taken at configure time. So that a commit is picked up without a manual
# re-configure, the git files that change on commit/checkout are configure dependencies.
# -DGALLEY_GIT_HASH=abc1234 names the hash where there is no .git (the image build copies sources only).
set(_galley_hash "nogit")
find_package(Git QUIET)
if(GALLEY_GIT_HASH MATCHES "^[0-9a-f]+$")
    set(_galley_hash "${GALLEY_GIT_HASH}")
elseif(GIT_FOUND AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
    execute_process(
        COMMAND "${GIT_EXECUTABLE}" rev-parse --short HEAD
        WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
        OUTPUT_VARIABLE _galley_git_out
        ERROR_QUIET
        RESULT_VARIABLE _galley_git_rc
        OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_galley_git_rc EQUAL 0 AND _galley_git_out MATCHES "^[0-9a-f]+$")
        set(_galley_hash "${_galley_git_out}")
    endif()
    # .git is a directory in a normal clone (a file in a worktree/submodule: then skip this).
    if(IS_DIRECTORY "${PROJECT_SOURCE_DIR}/.git")
        foreach(_f HEAD logs/HEAD packed-refs)
            if(EXISTS "${PROJECT_SOURCE_DIR}/.git/${_f}")
                set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                             "${PROJECT_SOURCE_DIR}/.git/${_f}")
            endif()
        endforeach()
    endif()
endif()
set(GALLEY_VERSION_STRING "${PROJECT_VERSION}-${_galley_hash}")
