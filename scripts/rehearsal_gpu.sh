#!/usr/bin/env bash
# The rehearsal's train jobs on a GPU machine that has torch but neither Snakemake, Java nor pyserini
# (#28 item 5): each job runs through its stage command, `python -m harness train --config
# results/rehearsal/config.yaml --job J --out ...`, in its own process, in the order given, with
# `timeout` and one deadline for the whole list; each job's meta.json (its `cost`: seconds, peak host
# and GPU memory, seconds per step) and log are gathered into one archive for
# `python -m harness estimate --measured DIR`.
#
# Prepared where Snakemake runs (the CPU steps the train jobs read; a few MB):
#   snakemake --cores all results/rehearsal/negatives/nq.jsonl results/rehearsal/negatives/msmarco.jsonl \
#     results/rehearsal/decontam results/rehearsal/indexes/svdr.token/nq \
#     --configfile configs/profiles/paper.yaml configs/profiles/rehearsal.yaml
# Then, on the GPU machine, in the repository root with those folders beside it:
#   scripts/rehearsal_gpu.sh OUTDIR SECONDS JOB[=TIMEOUT] ...
# e.g. scripts/rehearsal_gpu.sh /tmp/out 480 dpr=90 qcr=120 lightretriever=150
# (CONFIG=path/config.yaml names another resolved config.)
# Packages the harness's train jobs need beyond torch/transformers/peft/accelerate (jsonschema,
# vector-quantize-pytorch, ...) go on PYTHONPATH first; the uncased WordPiece vocabulary of the
# `config:` backbones comes from the `cognition` package's model/tokenizer.json (a folder on
# PYTHONPATH holding cognition/model/{config,tokenizer}.json is enough).
set -u
out=${1:?OUTDIR}; budget=${2:?SECONDS}; shift 2
config=${CONFIG:-results/rehearsal/config.yaml}
mkdir -p "$out/models" "$out/logs/train"
start=$(date +%s)
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  nproc; free -g | sed -n 2p
} > "$out/machine.txt" 2>&1
for spec in "$@"; do
  job=${spec%%=*}; limit=${spec#*=}; [ "$limit" = "$spec" ] && limit=300
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 20 ]; then echo "$job: not started (deadline)" | tee -a "$out/summary.txt"; continue; fi
  [ "$limit" -gt "$left" ] && limit=$left
  dest=/tmp/rehearsal-models/$job
  rm -rf "$dest"
  log="$out/logs/train/$job.log"  # the results tree's layout: python -m harness estimate --measured $out
  t0=$(date +%s%N)
  timeout -k 10 "$limit" python3 -m harness --log "$log" train --config "$config" --job "$job" --out "$dest"
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  mkdir -p "$out/models/$job"
  for f in meta.json loss.tsv; do [ -f "$dest/$f" ] && cp "$dest/$f" "$out/models/$job/"; done
  echo "$job: rc $rc, $ms ms (limit $limit s)$([ "$rc" = 124 ] && echo ', timed out')" | tee -a "$out/summary.txt"
  grep -h '^error:' "$log" 2>/dev/null | tail -1 | tee -a "$out/summary.txt"
  rm -rf "$dest"
done
