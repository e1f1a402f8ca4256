# The CMake package of ckptfix's C++ release (ckptfix-VERSION-linux-ARCH-cxx):
#
#   find_package(ckptfix CONFIG REQUIRED)   # CMAKE_PREFIX_PATH names the unpacked folder
#   target_link_libraries(app PRIVATE ckptfix::ckptfix)   # or ckptfix::libtorch
#
# ckptfix::ckptfix   lib/libckptfix.a: the core library, built like the
#                    release binary (glibc >= 2.31, g++ 10, position
#                    independent), with zlib, libdeflate and xxHash inside,
#                    so it needs nothing but the C++ runtime. Headers need
#                    C++20 (carried as an interface compile feature).
# ckptfix::libtorch  the LibTorch bridge (ckptfix/libtorch.h), compiled here,
#                    in the consumer's own build, from share/ckptfix/libtorch
#                    against the consumer's LibTorch (find_package(Torch)),
#                    whatever its version from 1.13 on: no binary of ours
#                    meets LibTorch's ABI. Defined when Torch is found.
# ckptfix::torch     the same, under its old name (deprecated, issue 52).
#
# Both use the C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1): a LibTorch
# built with the old ABI (the "pre-cxx11 ABI" archives) is refused.
cmake_minimum_required(VERSION 3.16)
get_filename_component(_ckptfix_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

include(CMakeFindDependencyMacro)
find_dependency(Threads)

if(NOT TARGET ckptfix::ckptfix)
  add_library(ckptfix::ckptfix STATIC IMPORTED)
  set_target_properties(ckptfix::ckptfix PROPERTIES
    IMPORTED_LOCATION "${_ckptfix_prefix}/lib/libckptfix.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_ckptfix_prefix}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
endif()

if(NOT TARGET ckptfix::libtorch)
  if(NOT TORCH_FOUND)
    find_package(Torch QUIET)
  endif()
  if(TORCH_FOUND)
    if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
      message(FATAL_ERROR "ckptfix: the LibTorch found (${TORCH_INSTALL_PREFIX}) uses the pre-C++11 std::string ABI; "
                          "ckptfix::libtorch needs a LibTorch built with the C++11 ABI (Debian's, pip's torch >= 2.7, "
                          "or the 'cxx11 ABI' LibTorch archives)")
    endif()
    enable_language(CXX)
    file(GLOB _ckptfix_bridge_sources "${_ckptfix_prefix}/share/ckptfix/libtorch/*.cc")
    add_library(ckptfix_libtorch STATIC ${_ckptfix_bridge_sources})
    # Its private headers are included as "libtorch/<name>.h".
    target_include_directories(ckptfix_libtorch PRIVATE "${_ckptfix_prefix}/share/ckptfix")
    target_link_libraries(ckptfix_libtorch PUBLIC ckptfix::ckptfix torch)
    target_compile_features(ckptfix_libtorch PUBLIC cxx_std_20)
    set_target_properties(ckptfix_libtorch PROPERTIES POSITION_INDEPENDENT_CODE ON)
    add_library(ckptfix::libtorch ALIAS ckptfix_libtorch)
    add_library(ckptfix_torch_deprecated INTERFACE)
    target_link_libraries(ckptfix_torch_deprecated INTERFACE ckptfix_libtorch)
    add_library(ckptfix::torch ALIAS ckptfix_torch_deprecated)
  endif()
endif()
set(ckptfix_HAS_TORCH ${TORCH_FOUND})
unset(_ckptfix_prefix)
