"""The device round and its runners: the virtual clock and real training on the host."""
