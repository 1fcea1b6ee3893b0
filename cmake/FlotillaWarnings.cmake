# Warning flags for every Flotilla target (interface library flotilla_warnings).
add_library(flotilla_warnings INTERFACE)
target_compile_options(flotilla_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FLOTILLA_WERROR}>>:-Werror>)
if(FLOTILLA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
