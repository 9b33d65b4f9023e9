#!/usr/bin/env bash
# The third call: gpu_check.sh on the sources with one dropout-state cache for both devices
# (MostRecentlyUsed and tf_dropout_seed in csrc/cudnn_rnn_config.h), rebuilt by gpu_prebuild.sh.
set -uo pipefail
bash benchmarks/gpu_check.sh "${OUT:-gpu-out}"
