"""porting/: ports of each source format end to end (Keras 3, Keras 2, TF1, SavedModel, on the
GPU), `convert` and `--verify`; the readers, graphs and describers in the subfolders named for
them. The builders' tests are test_build.py here: pytest does not collect a folder named build."""
