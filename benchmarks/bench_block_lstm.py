"""BlockLSTM fwd and fwd+bwd on CPU: ours vs torch.nn.LSTM vs TensorFlow (float32).

A thin script over ``torch_lstm_grad.tools.bench`` (also ``torch-lstm-grad bench``); see that module
for what is timed and how. Example::

    python benchmarks/bench_block_lstm.py --json benchmarks/results/cpu.json
    python benchmarks/bench_block_lstm.py --shape 50,32,256,256 --no-tf
"""

from torch_lstm_grad.tools.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
