# Warning flags for every Flotilla target (interface library flotilla_warnings).
add_library(flotilla_warnings INTERFACE)
target_compile_options(flotilla_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FLOTILLA_WERROR}>>:-Werror>)
# GCC 12 at -O3 reports `"x" + std::string` as an overlapping memcpy (GCC bug 105651, fixed in 13):
# a false positive in libstdc++'s own code, so it stays a warning there, never an error.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(flotilla_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict>)
endif()
if(FLOTILLA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
