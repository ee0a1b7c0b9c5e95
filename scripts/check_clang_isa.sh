#!/usr/bin/env bash
# Compiles, with clang at -O0 (code generation, where clang checks the target features of inlined intrinsics), every source that has an instruction-set region
# (KILN_ISA_AVX2_BEGIN / KILN_ISA_AVX512_BEGIN, src/backends/cpu/isa_region.h): clang ignores
# GCC's target pragma, and the libFuzzer build (clang only) once broke on every such kernel while
# the g++ build passed. Headers are checked through the sources that include them. Exit 77
# (skipped) where clang++ is not installed. Usage: scripts/check_clang_isa.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ > /dev/null || { echo "clang++ not installed: skipped"; exit 77; }
# The sources with a region and those including a header with one.
mapfile -t headers < <(grep -l "KILN_ISA_AVX" src/backends/cpu/*.h | grep -v isa_region.h | xargs -n1 basename)
pattern="KILN_ISA_AVX$(printf '|%s' "${headers[@]}")"
mapfile -t files < <(grep -lE "$pattern" src/backends/cpu/*.cpp plugins/*/*.cpp 2> /dev/null)
status=0
for f in "${files[@]}"; do
  if ! clang++ -std=c++20 -O0 -c -o /dev/null -fopenmp -Wno-unknown-pragmas -I. -Iinclude "$f" 2> /tmp/kiln_clang_isa.$$; then
    echo "clang++ rejects $f:"
    head -20 /tmp/kiln_clang_isa.$$
    status=1
  fi
done
rm -f /tmp/kiln_clang_isa.$$
[[ $status == 0 ]] && echo "clang++ compiles the ${#files[@]} sources with instruction-set regions"
exit $status
