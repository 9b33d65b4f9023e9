"""porting/formats/: the readers of each file format."""
