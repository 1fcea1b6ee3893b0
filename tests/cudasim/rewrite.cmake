# cmake -DIN=x.cu -DOUT=x.cu.cpp -P rewrite.cmake
# Turns `kernel<T, K><<<grid, block, shared, stream>>>(args)` into
# `::cudasim::launch(kernel<T, K>, "kernel<T, K>", grid, block, shared, stream)(args)`, the only
# CUDA syntax a host compiler cannot parse (clang-format may put the `<<<` on the next line). A #line keeps errors pointing at the .cu file.
file(READ "${IN}" text)
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[^<>;]*>)?)[ \t\n]*<<<([^;]*)>>>\\("
       "::cudasim::launch(\\1, \"\\1\", \\3)(" text "${text}")
if(text MATCHES "<<<")
  message(FATAL_ERROR "cudasim: a kernel launch in ${IN} was not rewritten")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
