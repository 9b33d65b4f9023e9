"""tools/: the command line (check, bench, doctor) and the CUDA build environment."""
