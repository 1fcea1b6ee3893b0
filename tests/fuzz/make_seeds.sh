#!/bin/sh
# Regenerates the fuzz seed corpora in tests/fuzz/corpus from a 2-step run of a tiny model (our own
# worker's files: a MANIFEST, a rank file, a token shard). Usage: make_seeds.sh path/to/flotilla-worker
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
rm -rf "$tmp"
