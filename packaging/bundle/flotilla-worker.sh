#!/bin/sh
# Flotilla worker bundle: the binary plus the shared libraries this node lacks.
d=$(dirname "$0")
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$d/flotilla-worker.bin" "$@"
