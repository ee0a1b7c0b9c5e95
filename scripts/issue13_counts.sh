#!/bin/sh
# Issue 13's numbers for the tree in $1 (default: the current directory): lines of code in src/,
# string-keyed attribute reads in src/backends (all, and in the convolution and pooling kernels)
# and, where the library's `duplicates` tool is on the PATH, duplicate pairs (whole tree, src/).
cd "${1:-.}" || exit 1
echo "src lines (.cpp .h .cu .cuh): $(find src \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | xargs -0 cat | wc -l)"
RE='\b(attr_(int|ints|float|floats|string|strings)|get_(int|ints|float|floats|string|strings|tensor)|has)\(([^()"]*,[[:space:]]*)?"'
echo "string-keyed attribute reads in src/backends: $(grep -rnoE "$RE" src/backends | wc -l) in $(grep -rlE "$RE" src/backends | wc -l) files"
echo "  in the convolution and pooling kernels: $(grep -noE "$RE" src/backends/cpu/conv_cpu.cpp src/backends/cpu/conv_onednn.cpp src/backends/cpu/pooling_*.cpp src/backends/cuda/conv_* src/backends/cuda/pooling_cuda.cu | wc -l)"
if command -v duplicates > /dev/null; then
  echo "duplicates (whole tree): $(duplicates --seconds 200 --most 1 | head -1)"
  echo "duplicates (src/): $(duplicates --repo src --seconds 200 --most 1 | head -1)"
fi
