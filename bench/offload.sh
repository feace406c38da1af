#!/usr/bin/env bash
# bench/offload: ZeRO-Infinity on this machine, in one run (results in bench/results/offload.jsonl and a plot):
#  (1) the swapper against fio on the same folder: a small sweep of block sizes x queue depths, writes and
#      reads, each side's GB/s and their ratio (bench/offload_swapper);
#  (2) a model that fits in RAM (GPT-2 124M, seq 512, fp16): step time with the state in RAM, with the optimizer
#      on NVMe, and with the optimizer and the weights on NVMe, and how much of the disk's busy time the overlap
#      hid (1 - waited / busy; bench/offload_train);
#  (3) GPT-2 XL (48 layers, 1600 hidden, 25 heads, 1.56B parameters; 28 GB of ZeRO state at 18 bytes per
#      parameter, more than this machine's 24 GiB) for 3 steps on one rank with the optimizer and the weights
#      on NVMe, seq 512, micro-batch 1, full activation checkpointing, the default sub_group_size and
#      buffer_count, reporting the peak RSS (VmHWM);
#  (4) where the disk has room, a 2.7B model (32 layers, 2560 hidden, 20 heads) the same way.
#   bench/offload.sh [--nvme-path DIR] [--size 4GiB] [--parts "1 2 3 4"] [--out FILE]
# Takes about an hour on 2 cores (most of it parts 3 and 4).
set -euo pipefail
cd "$(dirname "$0")/.."
nvme_path=${TMPDIR:-/tmp}/gpt_offload_bench
size=4GiB
parts="1 2 3 4"
out=bench/results/offload.jsonl
while (($#)); do
  case $1 in
    --nvme-path) nvme_path=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench/offload.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
source scripts/env.sh
command -v fio >/dev/null || { echo "bench/offload.sh: fio is missing; run scripts/setup" >&2; exit 2; }
bazel build //bench:offload_swapper //bench:offload_train >/dev/null 2>&1
mkdir -p "$nvme_path"
: >"$out"
free_bytes() { df --output=avail -B1 "$nvme_path" | tail -1; }
train() {  # $1: label, then offload_train's flags
  local label=$1
  shift
  echo "bench/offload: $label" >&2
  bazel-bin/bench/offload_train --nvme-path "$nvme_path" "$@" 2>"$nvme_path/train.err" |
    sed "s/^{/{\"part\":\"$label\",/" >>"$out" || { cat "$nvme_path/train.err" >&2; return 1; }
  grep -E "^step|^note" "$nvme_path/train.err" >&2 || true
}
# A model needs its swap files (18 bytes per parameter in fp16) plus room to spare.
has_room() { (($(free_bytes) > $1 * 18 * 11 / 10)); }

for part in $parts; do
  case $part in
    1) bazel-bin/bench/offload_swapper --nvme-path "$nvme_path" --size "$size" --repeats 3 | sed 's/^{/{"part":"swapper",/' >>"$out" ;;
    2)
      gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq 512 --batch 1 --fp16 --steps 4)
      train ram "${gpt2[@]}"
      train optimizer_nvme "${gpt2[@]}" --offload-optimizer nvme
      train both_nvme "${gpt2[@]}" --offload-optimizer nvme --offload-param nvme
      ;;
    3)
      xl=(--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq 512 --batch 1 --fp16 --steps 3
        --checkpoint-activations --offload-optimizer nvme --offload-param nvme)
      if has_room 1560000000; then train gpt2_xl "${xl[@]}"; else
        echo "{\"part\":\"gpt2_xl\",\"skipped\":\"$(free_bytes) bytes free in $nvme_path\"}" >>"$out"; fi
      ;;
    4)
      # Its wte shard (50304 x 2560 = 129M elements) needs offload_param.buffer_size above DeepSpeed's 1e8.
      b27=(--num-layers 32 --hidden-size 2560 --num-attention-heads 20 --seq 512 --batch 1 --fp16 --steps 3
        --checkpoint-activations --offload-optimizer nvme --offload-param nvme --param-buffer-size 130000000)
      if has_room 2700000000; then train gpt_2.7b "${b27[@]}"; else
        echo "{\"part\":\"gpt_2.7b\",\"skipped\":\"$(free_bytes) bytes free in $nvme_path\"}" >>"$out"; fi
      ;;
  esac
done
rm -f "$nvme_path/train.err"
scripts/plot "$out" "${out%.jsonl}.png"
echo "bench/offload: results in $out and ${out%.jsonl}.png" >&2
