"""Modeled reference device profiles (Jetson Nano, Jetson TX2 NX) and modeled efficiency curves.

No board is attached to this project's build machines, yet the simulation, the CLI and the tests
need profiles that behave like the boards in the paper. This package builds them from a small,
documented device model instead of inventing numbers row by row:

* the GPU frequency tables are the real devfreq ``available_frequencies`` of the two boards;
* power follows DVFS physics: board input = idle + host (CPU/DRAM) + GPU dynamic power, the last
  proportional to ``f * V(f)^2`` on a per-board voltage curve and to a batch-dependent activity;
* step time = a fixed per-step cost + GPU work that saturates the GPU only at larger batches and
  scales as ``1/f`` except for a memory-bound share.

The constants are *fitted* to the paper's Tables 2-4 and the baselines' clock caps by
:mod:`simulations.calibrate` (written to ``simulations/calibration.json``, loaded by
:mod:`.fitted`); the hand-set values in :mod:`.boards`, :mod:`.workloads` and :mod:`.curves` are
the fit's starting point and weak priors. Generation asserts the caps
(:func:`.paper_checks.check_baseline_caps`); :func:`.paper_checks.check_calibration` tests Fig. 1
and Fig. 2, which the fit holds as hinges (``simulations.calibrate.objective.FIT_FIGURES``).
Everything is deterministic: the small "measurement noise" comes from a keyed hash
(:mod:`.noise`), not from a random generator whose stream could change between numpy releases, so
regenerating gives byte-identical files.

Every generated file says in its ``#`` header that it is modeled, not measured.

Where things live, one job a module:

* :mod:`.boards`: the boards (frequency tables, voltage curves, hand-set scales);
* :mod:`.workloads`: the models' hand-set cost constants;
* :mod:`.physics`: time and power against batch size and clock;
* :mod:`.noise`: the keyed, deterministic measurement noise;
* :mod:`.curves`: the samples-to-accuracy law and its hand-set curves;
* :mod:`.fitted`: the constants in force (the hand-set ones with the fit applied);
* :mod:`.profiles`, :mod:`.efficiency_files`: the profile and efficiency CSVs;
* :mod:`.files`: what every generated file shares (version stamp, atomic write, ``#`` header);
* :mod:`.paper_checks`: the paper's published points the profiles must keep;
* :mod:`.generate`: write every file after the checks (``__main__`` runs it).

Regenerate everything with ``python -m simulations.devicemodel --out simulations/profiles``.
"""
