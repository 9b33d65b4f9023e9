"""modules.py: the TF1 and Cudnn* modules, on the CPU, the GPU and under DistributedDataParallel."""
