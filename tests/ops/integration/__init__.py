"""torch.library.opcheck, torch.compile and torch.export of every op, one file per op family."""
