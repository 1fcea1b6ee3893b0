#!/bin/sh
# Regenerates the fuzz seed corpora in tests/fuzz/corpus from a 2-step run of a tiny model (our own
# worker's files: a MANIFEST, a rank file, a token shard, a metrics.jsonl with every record type) and
# a known_hosts file with fresh keys from ssh-keygen. corpus/ssh_config is written by hand. The
# tokenizer target's seeds are the committed golden tokenizers (tests/engine/golden/tokenizers).
# Usage: make_seeds.sh path/to/flotilla-worker
set -eu
worker=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
cat > "$tmp/t.toml" <<'TOML'
[run]
name = "seed"
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 1
n_embd = 8
vocab_size = 16
max_seq_len = 8
[data]
synthetic_tokens = 200
[train]
steps = 2
micro_batch = 1
seq_len = 4
TOML
OMP_NUM_THREADS=1 "$worker" train --config "$tmp/t.toml" --out-dir "$tmp/r" --quiet --no-stdout-metrics
ck="$tmp/r/checkpoints/step-00000002"
{ printf '\000'; cat "$ck/MANIFEST"; } > "$here/corpus/checkpoint/manifest"   # first byte 0: MANIFEST parser
{ printf '\001'; cat "$ck/rank-0.bin"; } > "$here/corpus/checkpoint/rank-0"    # first byte 1: rank-file reader
cp "$tmp/r/data/synthetic-v16-s1337-n200/val_000.bin" "$here/corpus/shard/val_000.bin"
# The metrics seed: the same run with an eval and a sample every step (run_start, event, step, eval,
# sample, checkpoint and summary records).
{ cat "$tmp/t.toml"; printf '[eval]\nevery = 1\nbatches = 1\nsample_every = 1\nsample_tokens = 4\n'; } > "$tmp/m.toml"
OMP_NUM_THREADS=1 "$worker" train --config "$tmp/m.toml" --out-dir "$tmp/m" --quiet --no-stdout-metrics
cp "$tmp/m/metrics.jsonl" "$here/corpus/metrics/metrics.jsonl"
# known_hosts: a plain, a bracketed and a multi-name entry, a comment and a marker line.
ssh-keygen -q -t ed25519 -N '' -f "$tmp/k1" && ssh-keygen -q -t ecdsa -N '' -f "$tmp/k2"
{
  printf '# the workspace known_hosts\n'
  printf '[127.0.0.1]:2222 %s\n' "$(cut -d' ' -f1,2 "$tmp/k1.pub")"
  printf 'gpu-box,10.0.0.7 %s\n' "$(cut -d' ' -f1,2 "$tmp/k2.pub")"
  printf '[127.0.0.1]:2222 %s\n' "$(cut -d' ' -f1,2 "$tmp/k2.pub")"
  printf '@cert-authority *.example.org %s\n' "$(cut -d' ' -f1,2 "$tmp/k1.pub")"
} > "$here/corpus/known_hosts/known_hosts"
rm -rf "$tmp"
