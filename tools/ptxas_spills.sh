#!/usr/bin/env bash
# Register-spill check for the CUDA kernels: reads ptxas's report on every kernels/cuda/*.cu (the logs that
# tools/cuda.bzl's nvcc compiles write with `-Xptxas -v`, so nothing is compiled twice), its "N bytes spill
# stores, M bytes spill loads" for each function and each architecture, and fails on any function that spills
# unless tools/ptxas_spill_allowlist.txt lists it (for that architecture) with a reason. A spill moves registers
# through local memory: slow, and usually a sign that a kernel's tile or unrolling outgrew the register file.
#
# Usage: ptxas_spills.sh ALLOWLIST LOG...
#   LOG: NAME.ptxas.log, nvcc's output for NAME.cu (//kernels/cuda:ptxas_logs).
# Allow-list lines: `kernel name | arch | reason`, the name mangled or demangled (as c++filt prints it), the
# arch as ptxas names it (sm_90) or `*` for all; blank lines and lines starting with # are skipped.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 ALLOWLIST LOG..." >&2
  exit 2
fi
allowlist=$1
shift
logs=("$@")
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
for log in "${logs[@]}"; do
  name=$(basename "$log" .ptxas.log).cu
  parse_log "$name" <"$log" >>"$records"
done
if grep -q '^UNPARSED' "$records"; then
  grep '^UNPARSED' "$records" >&2
  echo "ptxas_spills: ptxas printed spill lines this script cannot read; update parse_log" >&2
  exit 1
fi
if [[ ! -s $records ]]; then
  echo "ptxas_spills: ptxas reported no functions in ${#logs[@]} logs; did its output format change?" >&2
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
