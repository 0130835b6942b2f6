# Sourced by the bench scripts: where the shardtrain binary and Python are, in a source tree
# (build/, .venv/) or in an unpacked bundle (bin/shardtrain, the system's python3).
# Sets: repo, bin, py. Env: SHARDTRAIN_BIN, PYTHON.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${SHARDTRAIN_BIN:-}" ]; then bin=$SHARDTRAIN_BIN
elif [ -x "$repo/libexec/shardtrain" ]; then bin=$repo/bin/shardtrain  # the bundle's launcher
else bin=$repo/build/src/shardtrain; fi
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x "$repo/.venv/bin/python" ]; then py=$repo/.venv/bin/python
else py=python3; fi
