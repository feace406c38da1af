#!/usr/bin/env bash
# scripts/plot draws a PNG from a gpt_train metrics file (with and without validation lines), from two of them
# side by side, and from bench/cluster's JSON lines, and refuses input it cannot read with exit code 2.
# Arg: path of scripts/plot.
set -uo pipefail
PLOT=$1
source "$(dirname "$0")/test_lib.sh"
is_png() { [[ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]]; }
for s in 1 2 3 4; do
  echo "{\"step\":$s,\"loss\":$((10 - s)).5,\"lr\":0.001,\"tokens_per_s\":$((1000 + s)),\"bytes_inter_node\":5}"
done >"$TMP/metrics.jsonl"
echo '{"step": 4, "val_loss": 6.9}' >>"$TMP/metrics.jsonl"
"$PLOT" "$TMP/metrics.jsonl" "$TMP/metrics.png" >/dev/null || fail "metrics plot failed"
is_png "$TMP/metrics.png" || fail "metrics plot is not a PNG"
for b in none 1gbit; do
  for c in zero3 zeropp; do
    echo "{\"config\": \"$c\", \"bandwidth\": \"$b\", \"tokens_per_s\": 12.5, \"bytes_inter_node_per_step\": 1, \"link_bytes_per_step\": 1}"
  done
done >"$TMP/cluster.jsonl"
"$PLOT" "$TMP/cluster.jsonl" "$TMP/bars.png" >/dev/null || fail "bar plot failed"
is_png "$TMP/bars.png" || fail "bar plot is not a PNG"
# Two runs side by side (scripts/demo): loss curves and bytes per step, validation traffic taken out.
sed 's/"bytes_inter_node":5/"bytes_inter_node":9,"bytes_by_phase":{"eval":{"intra":0,"inter":4}}/' \
  "$TMP/metrics.jsonl" >"$TMP/other.jsonl"
"$PLOT" "$TMP/metrics.jsonl" "$TMP/other.jsonl" "$TMP/both.png" >/dev/null || fail "two-run plot failed"
is_png "$TMP/both.png" || fail "two-run plot is not a PNG"
"$PLOT" "$TMP/metrics.jsonl" "$TMP/missing.jsonl" "$TMP/x.png" 2>"$TMP/err"
[[ $? == 2 ]] && grep -q "cannot read $TMP/missing.jsonl" "$TMP/err" || fail "two runs, one missing: $(cat "$TMP/err")"
"$PLOT" "$TMP/missing.jsonl" "$TMP/x.png" 2>"$TMP/err"
[[ $? == 2 ]] && grep -q "cannot read $TMP/missing.jsonl" "$TMP/err" || fail "missing input: $(cat "$TMP/err")"
((failures == 0)) && echo "plots drawn"
exit $((failures > 0))
