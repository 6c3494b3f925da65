#!/usr/bin/env bash
# The rehearsal's jobs on a GPU machine that has torch but neither Snakemake, Java nor pyserini
# (#28 item 5): each job runs through its stage command, `python -m harness <stage> --config
# results/rehearsal/config.yaml --job J [--dataset D] --out ...`, in its own process, in the order
# given, with `timeout` and one deadline for the whole list. A job writes where the DAG puts it
# (results/<profile>/models/J, indexes/J/D, runs/D/J, metrics/D/J), so a train job's model is
# the input of the index and search jobs after it. Each job's meta.json (its `cost`: seconds, peak
# host and GPU memory, seconds per unit) and log are gathered into OUTDIR in the same layout, for
# `python -m harness estimate --measured OUTDIR`; a job that fails leaves its log's error line in
# OUTDIR/summary.txt. Back where the repository is committed, keep them in the cost ledger (one file
# per machine under configs/costs/, harness/ledger.py) and commit it, so every later estimate has them:
#   python -m harness estimate --config configs/profiles/paper.yaml --measured OUTDIR --record
#
# Prepared where Snakemake runs (the CPU steps the jobs read; a few MB):
#   snakemake --cores all results/rehearsal/negatives/nq.jsonl results/rehearsal/negatives/msmarco.jsonl \
#     results/rehearsal/decontam results/rehearsal/indexes/svdr.token/nq \
#     --configfile configs/profiles/paper.yaml configs/profiles/rehearsal.yaml
# Then, on the GPU machine, in the repository root with those folders beside it:
#   scripts/rehearsal_gpu.sh OUTDIR SECONDS [STAGE:]JOB[:DATASET][=TIMEOUT] ...
# STAGE is train (the default), index, search or measure; DATASET is every stage's but train's. E.g.
#   scripts/rehearsal_gpu.sh /tmp/out 480 dpr=90 index:dpr:nq=120 search:dpr:nq=60 qcr=120
# (CONFIG=path/config.yaml names another resolved config; its folder is the results tree.)
# Packages the harness's jobs need beyond torch/transformers/peft/accelerate (jsonschema,
# vector-quantize-pytorch, ...) go on PYTHONPATH first; the uncased WordPiece vocabulary of the
# `config:` backbones comes from the `cognition` package's model/tokenizer.json (a folder on
# PYTHONPATH holding cognition/model/{config,tokenizer}.json is enough).
set -u
out=${1:?OUTDIR}; budget=${2:?SECONDS}; shift 2
config=${CONFIG:-results/rehearsal/config.yaml}
root=$(dirname "$config")
mkdir -p "$out"
start=$(date +%s)
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nproc; free -g | sed -n 2p
} > "$out/machine.txt" 2>&1
for spec in "$@"; do
  what=${spec%%=*}; limit=${spec#*=}; [ "$limit" = "$spec" ] && limit=300
  IFS=: read -r -a part <<< "$what"
  case ${#part[@]} in
    1) stage=train; job=${part[0]}; dataset= ;;
    2) stage=${part[0]}; job=${part[1]}; dataset= ;;
    *) stage=${part[0]}; job=${part[1]}; dataset=${part[2]} ;;
  esac
  case $stage in
    train) rel=models/$job ;;
    index) rel=indexes/$job/$dataset ;;
    search) rel=runs/$dataset/$job ;;
    measure) rel=metrics/$dataset/$job ;;
    *) echo "$what: unknown stage $stage (train, index, search, measure)" | tee -a "$out/summary.txt"; continue ;;
  esac
  name=$job${dataset:+-$dataset}
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 20 ]; then echo "$stage $name: not started (deadline)" | tee -a "$out/summary.txt"; continue; fi
  [ "$limit" -gt "$left" ] && limit=$left
  dest=$root/$rel
  rm -rf "$dest"
  mkdir -p "$out/logs/$stage" "$(dirname "$dest")"
  log="$out/logs/$stage/$name.log"  # the results tree's layout: python -m harness estimate --measured $out
  t0=$(date +%s%N)
  timeout -k 10 "$limit" python3 -m harness --log "$log" "$stage" --config "$config" --job "$job" \
    ${dataset:+--dataset "$dataset"} --out "$dest"
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  mkdir -p "$out/$rel"
  for f in meta.json loss.tsv; do [ -f "$dest/$f" ] && cp "$dest/$f" "$out/$rel/"; done
  echo "$stage $name: rc $rc, $ms ms (limit $limit s)$([ "$rc" = 124 ] && echo ', timed out')" | tee -a "$out/summary.txt"
  grep -h '^error:' "$log" 2>/dev/null | tail -1 | tee -a "$out/summary.txt"
done
