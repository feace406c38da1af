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
#  (4) where the disk has room, a 2.7B model (32 layers, 2560 hidden, 20 heads) the same way;
#  (5) memory-centric tiling: 2 ranks (mpiexec -n 2), stage 3, everything in RAM, a model whose two blocks
#      dwarf the rest (hidden 4096, vocabulary 1000, 64 positions), --tile-factor 1, 2, 4 and 8: the engine's
#      "buffers" peak (the gathered working memory), its memory table's total, each rank's peak RSS, the
#      bytes gathered per step and the step time, with ratios against factor 1 (a table on stderr). About 10 minutes; it needs about 20 GiB
#      of RAM for the two ranks at factor 1 and is skipped when MemAvailable is lower.
#   bench/offload.sh [--nvme-path DIR] [--size 4GiB] [--parts "1 2 3 4"] [--out FILE] [--append]
# --append adds the lines to FILE (e.g. --parts 5 --append beside an earlier full run); otherwise FILE starts
# empty. Takes about an hour on 2 cores (most of it parts 3 and 4).
set -euo pipefail
cd "$(dirname "$0")/.."
nvme_path=${TMPDIR:-/tmp}/gpt_offload_bench
size=4GiB
parts="1 2 3 4"
out=bench/results/offload.jsonl
append=0
while (($#)); do
  case $1 in
    --nvme-path) nvme_path=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --append) append=1; shift ;;
    *) echo "bench/offload.sh: unknown option $1 (see the header of this file)" >&2; exit 2 ;;
  esac
done
source scripts/env.sh
command -v fio >/dev/null || { echo "bench/offload.sh: fio is missing; run scripts/setup" >&2; exit 2; }
bazel build //bench:offload_swapper //bench:offload_train >/dev/null 2>&1
mkdir -p "$nvme_path"
((append)) || : >"$out"
free_bytes() { df --output=avail -B1 "$nvme_path" | tail -1; }
train() {  # $1: label, then offload_train's flags; $launch (e.g. mpiexec -n 2) runs it when set
  local label=$1
  shift
  echo "bench/offload: $label" >&2
  ${launch:-} bazel-bin/bench/offload_train --nvme-path "$nvme_path" "$@" 2>"$nvme_path/train.err" |
    sed "s/^{/{\"part\":\"$label\",/" >>"$out" || { cat "$nvme_path/train.err" >&2; return 1; }
  grep -E "^step|^note" "$nvme_path/train.err" >&2 || true
}
# A model needs its swap files (18 bytes per parameter in fp16) plus room to spare.
has_room() { (($(free_bytes) > $1 * 18 * 11 / 10)); }
mem_available() { echo $(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) * 1024)); }
# Part 5's table from its lines in $out: per tile factor the buffers peak, the memory table's total, the
# largest peak RSS of the ranks, the median step time, and the ratios of buffers and time to factor 1.
tiling_table() {
  grep '"part":"tiling"' "$out" | grep -v skipped | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
base = next((r for r in runs if r["tile_factor"] == 1), runs[0])
med = lambda r: statistics.median(s["step_s"] for s in r["steps"])
gib = lambda b: b / 2**30
gathered = lambda r: r["steps"][-1]["gather_bytes"]
print("tile factor | largest unit | buffers peak | memory table total | peak RSS (max rank) | gathered per step"
      " | median step | buffers / f1 | time / f1")
for r in runs:
    print("%d | %.1fM | %.2f GiB | %.2f GiB | %.2f GiB | %.2f GB | %.1f s | %.3f | %.2f" % (r["tile_factor"],
          r["largest_unit_elements"] / 1e6, gib(r["buffers_peak_bytes"]), gib(r["memory_table_total_bytes"]),
          gib(r["peak_rss_max_bytes"]), gathered(r) / 1e9, med(r),
          r["buffers_peak_bytes"] / base["buffers_peak_bytes"], med(r) / med(base)))' >&2
}

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
    5)
      # Two blocks of 12 x 4096^2 = 201M parameters each against 4M in wte and 0.3M in wpe; 2 ranks on the 2
      # cores, one thread each. Factor 1 measured 9.1 GiB in the memory table and 9.8 GB of peak RSS per
      # rank: about 20 GiB for the two ranks.
      tiling=(--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --vocab-size 1000 --seq 64
        --max-position-embeddings 64 --batch 1 --fp16 --checkpoint-activations --steps 3 --threads 1)
      if (($(mem_available) > 20 * 2**30)); then
        for factor in 1 2 4 8; do launch="mpiexec -n 2" train tiling "${tiling[@]}" --tile-factor "$factor"; done
        tiling_table
      else
        echo "{\"part\":\"tiling\",\"skipped\":\"$(mem_available) bytes of MemAvailable, 20 GiB needed\"}" >>"$out"
      fi
      ;;
  esac
done
rm -f "$nvme_path/train.err"
scripts/plot "$out" "${out%.jsonl}.png"
echo "bench/offload: results in $out and ${out%.jsonl}.png" >&2
