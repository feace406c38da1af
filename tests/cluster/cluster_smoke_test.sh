#!/usr/bin/env bash
# Smoke test of scripts/cluster: an emulated cluster of 2 nodes x 2 ranks (network namespaces, tbf-shaped veth
# links at 1 Gb/s) runs a few ZeRO++ steps (stage 3, fp16, qwZ + hpZ + qgZ) of gpt_train; the bytes the links
# carried must be at least the traffic meter's inter-node bytes and at most 1.2 times them. Then `down` must
# leave no namespace, link, qdisc, /etc/hosts entry, state file or process behind: after a normal run, after a
# training command that fails, after a rank killed with SIGKILL, after `cluster run` stopped with SIGTERM or
# killed with SIGKILL, and after an `up` that fails half-way. Without the privileges it needs it checks nothing,
# prints "SKIPPED (all checks): <probe command>: <error>" (scripts/test counts it as skipped) and passes.
#
# Baseline: gpt_train needs --train-iters >= 1, so there is no zero-step run. The test runs the same command
# twice, with 1 step and with 1 + 3 steps, and compares the differences: link bytes (B - A) against meter bytes
# (B - A). What both runs share (MPI and UCX wire-up, hydra's control traffic, the parameter broadcast at start,
# the first step, shutdown) cancels; what is left is the traffic of 3 steps as the links saw it (payload plus
# TCP/IP headers, ACKs, the per-step metric reductions and log lines) against the meter's payload of 3 steps.
#
# Args: path of gpt_train, path of scripts/cluster (cluster-launch next to it).
set -uo pipefail
TRAIN=$1
CLUSTER=$2
TMP=${TEST_TMPDIR:-$(mktemp -d)}
NAME="t$$" # this test's cluster: its own names, subnet, state file and /etc/hosts lines
NAME=${NAME:0:8}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
cl() { "$CLUSTER" --name "$NAME" "$@"; }
STATE_DIR=${GPT_CLUSTER_STATE_DIR:-/run/gpt-cluster}

# --- privileges --------------------------------------------------------------------------------------------------
probe_out=$(cl probe 2>&1)
probe_rc=$?
if ((probe_rc == 2)); then
  line=$(grep -m1 '^probe failed: ' <<<"$probe_out")
  echo "SKIPPED (all checks): ${line#probe failed: }"
  echo "(scripts/cluster probe: $probe_out)"
  exit 0
fi
((probe_rc == 0)) || {
  echo "FAIL: scripts/cluster probe exited $probe_rc: $probe_out" >&2
  exit 1
}
trap 'cl down >/dev/null 2>&1' EXIT

# --- inputs ------------------------------------------------------------------------------------------------------
# llm.c token shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens < 8192.
le32() { printf '%b' "$(printf '\\x%02x' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)))"; }
{
  le32 20240520
  le32 1
  le32 20000
  head -c 1012 /dev/zero
  # bytes 0-31: each uint16 token is at most 0x1f1f = 7967
  head -c 40000 /dev/urandom | tr '\200-\377' '\000-\177' | tr '\100-\177' '\000-\077' | tr '\040-\077' '\000-\037'
} >"$TMP/tokens.bin"
cat >"$TMP/zeropp.json" <<'JSON'
{ "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
  "fp16": { "enabled": true, "initial_scale_power": 12 },
  "zero_optimization": { "stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": true,
                         "zero_hpz_partition_size": 2 } }
JSON
# 5.5M parameters: about 11 MB cross the node boundary per step (qwZ forward gathers, qgZ gradients).
TRAIN_ARGS=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 64 --vocab-size 8192
  --threads 1 --data-path "$TMP/tokens.bin" --split 100,0,0 --deepspeed_config "$TMP/zeropp.json")

# --- helpers -----------------------------------------------------------------------------------------------------
sent_total() { cl bytes | awk '$1 == "total" { print $2 }'; }
meter_total() { grep -o '"bytes_inter_node":[0-9]*' "$1" | awk -F: '{ s += $2 } END { printf "%.0f\n", s }'; }
node_processes() { # every process in this cluster's namespaces
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^$NAME-"); do ip netns pids "$ns"; done
}
wait_for_first_step() { # METRICS_FILE
  for _ in $(seq 300); do
    [[ -s $1 ]] && return 0
    sleep 0.1
  done
  return 1
}
train_pid_in() { # NS: one gpt_train process in that node
  local p
  for p in $(ip netns pids "$1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == gpt_train ]] && {
      echo "$p"
      return 0
    }
  done
  return 1
}
# After `down`: nothing of this cluster may remain.
expect_nothing_left() { # CASE
  local what=$1 left
  left=$(ip netns list 2>/dev/null | grep "^$NAME-") && fail "$what: namespaces left: $left"
  left=$(ip -o link show | grep -E ": $NAME-[a-z0-9]+[@:]") && fail "$what: links left: $left"
  left=$(tc qdisc show | grep -E " dev $NAME-") && fail "$what: qdiscs left: $left"
  left=$(grep -F "# gpt-cluster $NAME" /etc/hosts) && fail "$what: /etc/hosts lines left: $left"
  [[ -e $STATE_DIR/$NAME.state ]] && fail "$what: state file left: $(cat "$STATE_DIR/$NAME.state")"
  left=$(pgrep -af -- "$TMP/") && fail "$what: processes left: $left"
  return 0
}
cluster_up() {
  local out
  out=$(cl up --nodes 2 --ranks-per-node 2 --bandwidth 1gbit 2>&1) || {
    fail "up: $out"
    echo "$failures check(s) failed" >&2
    exit 1
  }
}

# --- 1. traffic: links vs meter ----------------------------------------------------------------------------------
cluster_up
status=$(cl status 2>&1)
grep -q "2 nodes x 2 ranks per node" <<<"$status" || fail "status lacks the node count: $status"
[[ $(grep -c "qdisc tbf .* rate 1Gbit" <<<"$status") == 4 ]] || fail "status lacks 4 tbf qdiscs at 1Gbit: $status"

run_steps() { # LABEL ITERS: runs gpt_train; sets LINK (bytes the node links sent) and METER (inter-node bytes)
  local label=$1 iters=$2 before after out
  before=$(sent_total)
  out=$(timeout 90 "$CLUSTER" --name "$NAME" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --train-iters "$iters" \
    --metrics-file "$TMP/$label.jsonl" 2>&1) || fail "$label: run failed: $out"
  after=$(sent_total)
  grep -qF "world 4 ranks (2 nodes x 2 ranks per node), ZeRO stage 3, fp16" <<<"$out" ||
    fail "$label: banner does not show 2 real nodes x 2 ranks: $(grep world <<<"$out")"
  grep -qF "ZeRO++: qwZ on (int8, block 2048), hpZ on (h = 2), qgZ on" <<<"$out" || fail "$label: ZeRO++ not on: $out"
  [[ $(grep -c . "$TMP/$label.jsonl" 2>/dev/null) == "$iters" ]] || fail "$label: expected $iters metric lines"
  LINK=$((after - before))
  METER=$(meter_total "$TMP/$label.jsonl")
}
run_steps one 1
link_a=$LINK meter_a=$METER
run_steps four 4
link_b=$LINK meter_b=$METER
link=$((link_b - link_a))
meter=$((meter_b - meter_a))
echo "1 step: links $link_a B, meter $meter_a B; 4 steps: links $link_b B, meter $meter_b B"
ratio=$(awk -v l="$link" -v m="$meter" 'BEGIN { printf "%.4f", (m > 0 ? l / m : 0) }')
echo "3 steps (4 - 1): links carried $link B, meter counted $meter B inter-node: ratio $ratio"
((meter >= 10000000)) || fail "the meter counted only $meter inter-node bytes in 3 steps; the test needs >= 10 MB"
((link >= meter)) || fail "links carried $link B < meter's $meter B"
awk -v l="$link" -v m="$meter" 'BEGIN { exit !(l <= 1.2 * m) }' || fail "links carried $link B > 1.2 x meter's $meter B"
cl status

# --- 2. a training command that fails: its exit code, no processes left --------------------------------------------
timeout 60 "$CLUSTER" --name "$NAME" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --no-such-flag >/dev/null 2>&1
rc=$?
((rc == 2)) || fail "failing command: cluster run exited $rc, expected gpt_train's usage code 2"
[[ -z $(node_processes) ]] || fail "failing command left processes: $(node_processes)"

# --- 3. a rank killed with SIGKILL: the run fails, no processes left ----------------------------------------------
"$CLUSTER" --name "$NAME" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --train-iters 100000 \
  --metrics-file "$TMP/killed_rank.jsonl" >"$TMP/killed_rank.log" 2>&1 &
run_pid=$!
if wait_for_first_step "$TMP/killed_rank.jsonl" && victim=$(train_pid_in "$NAME-node2"); then
  kill -KILL "$victim"
else
  fail "killed rank: the run did not reach its first step in 30 s: $(tail -5 "$TMP/killed_rank.log")"
fi
timeout 60 tail --pid="$run_pid" -f /dev/null || fail "killed rank: cluster run still running 60 s after the kill"
wait "$run_pid"
rc=$?
((rc != 0)) || fail "killed rank: cluster run exited 0"
[[ -z $(node_processes) ]] || fail "killed rank: processes left in the nodes: $(node_processes)"

# --- 4. cluster run stopped with SIGTERM: it ends the job ---------------------------------------------------------
"$CLUSTER" --name "$NAME" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --train-iters 100000 \
  --metrics-file "$TMP/term.jsonl" >"$TMP/term.log" 2>&1 &
run_pid=$!
wait_for_first_step "$TMP/term.jsonl" || fail "SIGTERM: no first step in 30 s: $(tail -5 "$TMP/term.log")"
kill -TERM "$run_pid"
timeout 60 tail --pid="$run_pid" -f /dev/null || fail "SIGTERM: cluster run still running 60 s later"
wait "$run_pid"
rc=$?
((rc == 143)) || fail "SIGTERM: cluster run exited $rc, expected 143"
[[ -z $(node_processes) ]] || fail "SIGTERM: processes left in the nodes: $(node_processes)"

# --- 5. cluster run killed with SIGKILL (no cleanup of its own): down ends mpiexec and the ranks --------------------
"$CLUSTER" --name "$NAME" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --train-iters 100000 \
  --metrics-file "$TMP/sigkill.jsonl" >"$TMP/sigkill.log" 2>&1 &
run_pid=$!
wait_for_first_step "$TMP/sigkill.jsonl" || fail "SIGKILL: no first step in 30 s: $(tail -5 "$TMP/sigkill.log")"
mpiexec_pid=$(awk '$1 == "pid" { print $2 }' "$STATE_DIR/$NAME.state")
kill -KILL "$run_pid"
wait "$run_pid" 2>/dev/null
[[ -n $(node_processes) ]] || fail "SIGKILL: expected the ranks to outlive the killed cluster run (test setup)"
out=$(cl down 2>&1) || fail "down after SIGKILL: $out"
# A zombie (killed, not yet reaped by its new parent) is not running.
[[ -n $mpiexec_pid ]] && kill -0 "$mpiexec_pid" 2>/dev/null &&
  [[ $(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$mpiexec_pid/stat" 2>/dev/null) != Z ]] &&
  fail "SIGKILL: mpiexec $mpiexec_pid still running after down"
expect_nothing_left "down after a killed run"
out=$(cl down 2>&1) || fail "second down: $out"
grep -q "already down" <<<"$out" || fail "second down: $out"
expect_nothing_left "second down"

# --- 6. up failing half-way removes what it made -----------------------------------------------------------------
out=$(GPT_CLUSTER_TEST_FAIL_AT="$NAME-node2" cl up --nodes 2 --ranks-per-node 2 --bandwidth 1gbit 2>&1) &&
  fail "up with an injected failure succeeded: $out"
grep -q "removing what it made" <<<"$out" || fail "failed up did not clean up: $out"
expect_nothing_left "failed up"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "cluster smoke test passed"
