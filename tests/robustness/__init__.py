"""Hostile and altered inputs (fuzzed files, rewired graphs, tampered SavedModels), soak and
threads, and the suite's own checks (TORCH_LSTM_GRAD_REQUIRE_TF, the mutation harness's merge)."""
