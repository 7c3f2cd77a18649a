"""``python -m simulations.devicemodel --out simulations/profiles`` regenerates every file."""

from simulations.devicemodel.generate import main

if __name__ == "__main__":
    raise SystemExit(main())
