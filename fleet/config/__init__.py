"""The fleet TOML and its bounded field readers: devices, budgets, profiles, data, run settings."""
