# The C++ runtime of the extension must be the shared one torch loads.
#
# A module that carries its own static copy of libstdc++ beside the libstdc++.so.6 that torch
# has loaded runs with two copies of the runtime: its locale and stream state, exception
# type information and allocator bookkeeping are split between them. What that does depends
# on the two versions: on one GPU image (GCC 13.3 with only libstdc++.a on its link path) the
# first argument error of a native op killed the process (SIGSEGV); with GCC 12 and its own
# libstdc++.a, every number in an error message is lost ("complete_cumsum: lengths["). A
# compiler on libc++ beside torch's libstdc++ (or the reverse) cannot share torch's C++
# types at all. So the link is checked, not the symptoms:
#
# - at configure time, `hstu_check_cxx_runtime` links a probe module with the compiler and
#   flags of the build; where it does not depend on torch's runtime (by soname), it retries
#   once against the very file torch loads (found through a folder holding only a
#   `libstdc++.so` link to it, put first on the link path), and stops the configuration with
#   one line naming the compiler and the fix where that does not help;
# - after the module is linked, this file run as a script (`cmake -DHSTU_MODULE=... -P`)
#   checks the module itself the same way, since the module links more than the probe.

# The NEEDED entries of an ELF file, in order, through readelf or objdump.
function(hstu_needed_libraries file tool out_var)
  execute_process(COMMAND "${tool}" -d "${file}" OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc
                  ERROR_QUIET)
  if(NOT rc EQUAL 0)
    execute_process(COMMAND "${tool}" -p "${file}" OUTPUT_VARIABLE dynamic ERROR_QUIET)
  endif()
  # readelf: "(NEEDED)  Shared library: [libc.so.6]"; objdump -p: "NEEDED  libc.so.6".
  string(REGEX MATCHALL "NEEDED[^\n]*" lines "${dynamic}")
  set(found)
  foreach(line IN LISTS lines)
    if(line MATCHES "\\[([^]]+)\\]")
      list(APPEND found "${CMAKE_MATCH_1}")
    elseif(line MATCHES "NEEDED[ \t]+([^ \t]+)")
      list(APPEND found "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out_var} "${found}" PARENT_SCOPE)
endfunction()

# The soname family of a C++ runtime file: libstdc++.so.6.0.33 -> libstdc++.so.6.
function(hstu_runtime_soname path out_var)
  get_filename_component(name "${path}" NAME)
  if(name MATCHES "^(lib(std)?c\\+\\+\\.so\\.[0-9]+)")
    set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${out_var} "" PARENT_SCOPE)
  endif()
endfunction()

# Whether `needed` (a list of sonames) holds any C++ runtime, and which.
function(hstu_cxx_runtime_in needed out_var)
  set(${out_var} "" PARENT_SCOPE)
  foreach(lib IN LISTS needed)
    if(lib MATCHES "^lib(std)?c\\+\\+\\.so")
      set(${out_var} "${lib}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Links the probe module with the build's compiler and flags plus `extra_flags`; sets
# `out_var` to its NEEDED list, or to "LINK-FAILED: <first line>" when it does not link.
function(hstu_link_probe dir extra_flags tool out_var)
  file(WRITE "${dir}/probe.cpp" [=[
#include <sstream>
#include <stdexcept>
#include <string>
// What the operators use of the runtime: streams that format numbers, and exceptions.
extern "C" __attribute__((visibility("default"))) int hstu_runtime_probe(long n) {
  std::ostringstream text;
  text << "n = " << n;
  if (n < 0) throw std::invalid_argument(text.str());
  return static_cast<int>(text.str().size());
}
]=])
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  separate_arguments(compile_flags UNIX_COMMAND
                     "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${config}}")
  separate_arguments(link_flags UNIX_COMMAND
                     "${extra_flags} ${CMAKE_MODULE_LINKER_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS_${config}}")
  file(REMOVE "${dir}/probe.so")
  execute_process(
    COMMAND "${CMAKE_CXX_COMPILER}" ${compile_flags} -fPIC -shared ${link_flags}
            -o "${dir}/probe.so" "${dir}/probe.cpp"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${dir}/probe.so")
    string(REGEX REPLACE "\n.*" "" first "${out}")
    set(${out_var} "LINK-FAILED: ${first}" PARENT_SCOPE)
    return()
  endif()
  hstu_needed_libraries("${dir}/probe.so" "${tool}" needed)
  set(${out_var} "${needed}" PARENT_SCOPE)
endfunction()

function(hstu_elf_tool out_var)
  foreach(tool IN ITEMS "${CMAKE_READELF}" "${CMAKE_OBJDUMP}")
    if(tool AND EXISTS "${tool}")
      set(${out_var} "${tool}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  find_program(HSTU_OPS_ELF_TOOL NAMES readelf llvm-readelf objdump llvm-objdump)
  set(${out_var} "${HSTU_OPS_ELF_TOOL}" PARENT_SCOPE)
endfunction()

# The configure-time check. `torch_runtime`: the C++ runtime file torch's process has loaded
# (empty where it could not be read). May prepend a -L folder to CMAKE_MODULE_LINKER_FLAGS
# (in the caller's scope); sets HSTU_OPS_CXX_RUNTIME_SONAME there for the post-link check.
function(hstu_check_cxx_runtime torch_runtime)
  set(HSTU_OPS_CXX_RUNTIME_SONAME "" PARENT_SCOPE)
  hstu_runtime_soname("${torch_runtime}" want)
  hstu_elf_tool(tool)
  if(NOT want OR NOT tool)
    message(STATUS "hstu-ops: C++ runtime not checked (torch's runtime: "
                   "'${torch_runtime}', ELF reader: '${tool}')")
    return()
  endif()
  set(compiler "${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION})")
  set(dir "${CMAKE_BINARY_DIR}/cxx-runtime-probe")
  file(MAKE_DIRECTORY "${dir}")
  hstu_link_probe("${dir}" "" "${tool}" needed)
  hstu_cxx_runtime_in("${needed}" got)
  if(got STREQUAL want)
    message(STATUS "hstu-ops: the module links ${got}, the C++ runtime torch loads")
    set(HSTU_OPS_CXX_RUNTIME_SONAME "${want}" PARENT_SCOPE)
    return()
  endif()
  string(REGEX MATCH "-static-libstdc\\+\\+" static_flag
         "${CMAKE_CXX_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS}")
  set(why "links no shared C++ runtime (a static copy: no shared libstdc++ on its link path)")
  if(needed MATCHES "^LINK-FAILED")
    set(why "cannot link a probe module (${needed})")
  elseif(got)
    set(why "links ${got}")
  elseif(static_flag)
    set(why "is told to link libstdc++ statically (-static-libstdc++ in the flags)")
  endif()
  # The one repair that keeps the compiler: the runtime torch loads, by its own file, ahead of
  # everything else on the link path. Only for libstdc++ and where nothing forces a static one.
  if(want MATCHES "^libstdc" AND NOT got AND NOT static_flag AND NOT needed MATCHES "^LINK")
    set(link_dir "${dir}/torch-libstdcxx")
    file(REMOVE_RECURSE "${link_dir}")
    file(MAKE_DIRECTORY "${link_dir}")
    file(CREATE_LINK "${torch_runtime}" "${link_dir}/libstdc++.so" SYMBOLIC)
    hstu_link_probe("${dir}" "-L${link_dir}" "${tool}" needed)
    hstu_cxx_runtime_in("${needed}" got)
    if(got STREQUAL want)
      message(STATUS "hstu-ops: ${compiler} ${why}; linking torch's ${torch_runtime} instead")
      set(CMAKE_MODULE_LINKER_FLAGS "-L${link_dir} ${CMAKE_MODULE_LINKER_FLAGS}" PARENT_SCOPE)
      set(HSTU_OPS_CXX_RUNTIME_SONAME "${want}" PARENT_SCOPE)
      return()
    endif()
  endif()
  # The leading space keeps CMake from wrapping the line.
  message(FATAL_ERROR
    " hstu-ops: the C++ compiler ${compiler} ${why}, but torch loads ${torch_runtime}: two "
    "C++ runtimes in one process turn the native ops' errors into crashes. Fix: build with a "
    "compiler whose shared ${want} is the one torch loads (for example the system's g++: "
    "CXX=g++), and without -static-libstdc++ in CXXFLAGS/LDFLAGS/CMAKE_ARGS.")
endfunction()

# Script mode: the check of the linked module (POST_BUILD).
if(CMAKE_SCRIPT_MODE_FILE AND DEFINED HSTU_MODULE)
  hstu_needed_libraries("${HSTU_MODULE}" "${HSTU_ELF_TOOL}" needed)
  hstu_cxx_runtime_in("${needed}" got)
  if(NOT got STREQUAL HSTU_RUNTIME_SONAME)
    if(NOT got)
      set(got "no shared C++ runtime (a static copy)")
    endif()
    message(FATAL_ERROR
      " hstu-ops: ${HSTU_MODULE} links ${got}, not ${HSTU_RUNTIME_SONAME} as torch does; "
      "rebuild with a compiler whose shared ${HSTU_RUNTIME_SONAME} is torch's "
      "(for example the system's g++: CXX=g++) and without -static-libstdc++")
  endif()
endif()
