#!/usr/bin/env bash
# Register-spill check for the CUDA kernels: compiles the device code of every kernels/cuda/*.cu with nvcc,
# the build's own flags and `-Xptxas -v`, reads ptxas's "N bytes spill stores, M bytes spill loads" for each
# function and each architecture, and fails on any function that spills unless tools/ptxas_spill_allowlist.txt
# lists it (for that architecture) with a reason. A spill moves registers through local memory: slow, and
# usually a sign that a kernel's tile or unrolling outgrew the register file.
#
# Usage: ptxas_spills.sh NVCC ALLOWLIST ANCHOR -- NVCC_FLAGS...
#   ANCHOR: any file of kernels/cuda in the source tree (a runfile symlink is followed); the .cu files are
#   the ones next to it, and the workspace root above it is the include root, as in tools/cuda.bzl.
#   NVCC_FLAGS: tools/cuda.bzl's NVCC_FLAGS and CUDA_ARCH_FLAGS (tests/kernels_cuda/BUILD passes them).
# Allow-list lines: `kernel name | arch | reason`, the name mangled or demangled (as c++filt prints it), the
# arch as ptxas names it (sm_90) or `*` for all; blank lines and lines starting with # are skipped.
set -euo pipefail

if [[ $# -lt 4 || $4 != "--" ]]; then
  echo "usage: $0 NVCC ALLOWLIST ANCHOR -- NVCC_FLAGS..." >&2
  exit 2
fi
nvcc=$1 allowlist=$2 anchor=$3
shift 4
flags=("$@")

kernels_dir=$(dirname "$(readlink -f "$anchor")")
root=${kernels_dir%/kernels/cuda}
if [[ $root == "$kernels_dir" ]]; then
  echo "ptxas_spills: $anchor does not resolve into a kernels/cuda folder ($kernels_dir)" >&2
  exit 2
fi
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ptxas_spills.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One record per function and architecture: file, arch, mangled name, spill store bytes, spill load bytes.
# ptxas prints "Compiling entry function 'X' for 'sm_NN'" before an entry's properties; non-entry (noinline)
# functions follow the entries of the same architecture, so the last architecture seen is theirs.
parse_log() {
  awk -v file="$1" '
    /Compiling entry function .* for .sm_[0-9a-z]+.$/ {
      arch = $NF; gsub("\047", "", arch)
    }
    /Function properties for / { name = $NF }
    /bytes spill stores/ {
      stores = ""; loads = ""
      for (i = 1; i + 3 <= NF; ++i) {
        if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^stores/) stores = $i
        if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^loads/) loads = $i
      }
      if (name == "" || stores == "" || loads == "") { print "UNPARSED\t" file "\t" $0; next }
      printf "%s\t%s\t%s\t%s\t%s\n", file, (arch == "" ? "unknown" : arch), name, stores, loads
      name = ""
    }'
}

records=$work/records.tsv
: >"$records"
shopt -s nullglob
sources=("$kernels_dir"/*.cu)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "ptxas_spills: no .cu files in $kernels_dir" >&2
  exit 1
fi
# -fatbin: device code only, every architecture of the flags; the host half of the compile tells ptxas
# nothing and would double the time. One nvcc per core at a time (the test has the machine to itself).
compile_one() {  # SOURCE: its ptxas log in $work/NAME.log, and $work/NAME.failed when nvcc failed
  local name
  name=$(basename "$1" .cu)
  "$nvcc" "${flags[@]}" -Xptxas -v "-I$root" -fatbin "$1" -o "$work/$name.fatbin" 2>"$work/$name.log" ||
    touch "$work/$name.failed"
}
cores=$(nproc 2>/dev/null || echo 1)
for source in "${sources[@]}"; do
  while (($(jobs -rp | wc -l) >= cores)); do wait -n || true; done
  compile_one "$source" &
done
wait
for source in "${sources[@]}"; do
  name=$(basename "$source")
  log=$work/${name%.cu}.log
  if [[ -e $work/${name%.cu}.failed ]]; then
    cat "$log" >&2
    echo "ptxas_spills: nvcc failed on kernels/cuda/$name" >&2
    exit 1
  fi
  parse_log "$name" <"$log" >>"$records"
done
if grep -q '^UNPARSED' "$records"; then
  grep '^UNPARSED' "$records" >&2
  echo "ptxas_spills: ptxas printed spill lines this script cannot read; update parse_log" >&2
  exit 1
fi
if [[ ! -s $records ]]; then
  echo "ptxas_spills: ptxas reported no functions for ${#sources[@]} files; did its output format change?" >&2
  exit 1
fi

# Add the demangled name as a sixth column (c++filt keeps one name per line), then judge every spill.
cut -f3 "$records" | c++filt >"$work/demangled.txt"
paste "$records" "$work/demangled.txt" >"$work/named.tsv"
awk -F'\t' -v allowlist="$allowlist" '
  function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
  BEGIN {
    bad_lines = 0
    while ((getline line < allowlist) > 0) {
      ++line_number
      if (line ~ /^[ \t]*(#|$)/) continue
      first = index(line, "|"); rest = substr(line, first + 1); second = index(rest, "|")
      kernel = trim(substr(line, 1, first - 1)); arch = trim(substr(rest, 1, second - 1))
      reason = trim(substr(rest, second + 1))
      if (first == 0 || second == 0 || kernel == "" || arch == "" || reason == "") {
        printf "%s:%d: expected `kernel | arch | reason`: %s\n", allowlist, line_number, line
        ++bad_lines; continue
      }
      allowed[kernel "\t" arch] = reason; used[kernel "\t" arch] = 0
    }
  }
  {
    ++functions; files[$1] = 1
    if ($4 == 0 && $5 == 0) next
    key = ""
    for (k in allowed) {
      split(k, part, "\t")
      if ((part[1] == $3 || part[1] == $6) && (part[2] == $2 || part[2] == "*")) key = k
    }
    if (key != "") {
      used[key] = 1
      printf "allowed: %s %s: %s bytes spill stores, %s bytes spill loads (%s): %s\n",
             $1, $2, $4, $5, allowed[key], $6
    } else {
      printf "SPILLS:  %s %s: %s bytes spill stores, %s bytes spill loads: %s\n         mangled: %s\n",
             $1, $2, $4, $5, $6, $3
      ++failures
    }
  }
  END {
    for (k in used) {
      if (used[k]) continue
      split(k, part, "\t")
      printf "note: allow-list entry matches no spilling function now: %s | %s\n", part[1], part[2]
    }
    n = 0; for (f in files) ++n
    printf "ptxas_spills: %d functions x architectures in %d files, %d with spills not in the allow-list\n",
           functions, n, failures + 0
    if (failures > 0) {
      print "Fix the spill (smaller tiles, fewer live values, __launch_bounds__) or add"
      print "`name | arch | reason` to " allowlist
    }
    exit (failures > 0 || bad_lines > 0) ? 1 : 0
  }' "$work/named.tsv"
