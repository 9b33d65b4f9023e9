"""porting/graphs/: the GraphDef reader and the TF1 cell matcher."""
