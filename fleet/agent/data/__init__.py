"""Data on the device: the registry of prepared datasets and their loader (`datasets`), the file
formats read without pickle (`tensorfile`, `imagefiles`, `cifar`, `textdata`, `vocab`), the
trainer's indexed view of a data set (`indexed_data`), deterministic splits (`splits`), and the one
error every reader raises (`dataerror`). Standard library and numpy; torch only where a tensor is
built.
"""
