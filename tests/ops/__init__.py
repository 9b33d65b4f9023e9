"""raw_ops.py, ops.py, autograd.py and reference.py: TF parity, gradients, bad input, accuracy,
the CPU instruction sets and the GPU kernels."""
