#!/usr/bin/env bash
# Prints what decides the floating-point code of an -march=native build on this machine: the CPU that GCC
# targets and the CPU's SIMD and FMA flags. Golden numbers are compared bit for bit only where this matches.
set -euo pipefail
echo "march $(gcc -march=native -Q --help=target 2>/dev/null | awk '$1 == "-march=" {print $2; exit}')"
flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)
echo -n "flags"
for f in sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 \
  avx512_fp16 avx512vnni avx_vnni amx_tile amx_bf16; do
  [[ " $flags " == *" $f "* ]] && echo -n " $f"
done
echo
