"""`powerfleet predict`: fill a sparse profile's grid with predicted points (issue 11).

The measured rows are written back exactly as read; each missing (batch size, knob) point of
the requested grid gets a row with ``source=predicted``, and ``#`` lines say how they were made
(method and held-out-row validation error per column). The prediction itself lives in
``fleet.agent.prediction.predict`` so the board's profiler uses the same code.
"""

from __future__ import annotations

import argparse

from fleet.agent.prediction.fit import PredictError
from fleet.agent.prediction.predict import describe, predict_profile
from fleet.cli import checks
from fleet.cli.common import console, emit_json, table
from fleet.common.errors import InputError
from fleet.core.profile import load_profile
from fleet.method.profile_io import read_rows, write_rows
from fleet.trust.coverage import read_coverage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="predict time and power at the un-probed points of a sparse profile's grid",
    )
    p.add_argument("--profile", required=True, help="sparse profile CSV (the probed points)")
    p.add_argument(
        "--batch-sizes",
        type=checks.number_list(True),
        help="comma-separated grid batch sizes (default: the profile's grid)",
    )
    p.add_argument(
        "--freqs",
        type=checks.number_list(False),
        help="comma-separated grid knob values, MHz or W (default: the profile's grid)",
    )
    p.add_argument(
        "--out",
        required=True,
        type=checks.output_file("profile CSV"),
        help="full profile CSV to write",
    )
    p.add_argument(
        "--next",
        type=int,
        default=0,
        metavar="N",
        help="also name up to N more points to probe: those whose measurement could change "
        "the choice at --budgets (with --efficiency, else every batch size alike)",
    )
    p.add_argument("--budgets", help="with --next: comma-separated budgets in W (or 'none')")
    p.add_argument("--efficiency", help="with --next: efficiency CSV (samples to accuracy)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.budgets and not args.next:  # a flag that would change nothing is refused, not lost
        raise InputError("--budgets is for --next N (the budgets the next probes are chosen at)")
    load_profile(args.profile)  # validates the file: one line naming file/line/field
    coverage = read_coverage(args.profile)
    if args.batch_sizes:
        batch_sizes = args.batch_sizes
    else:
        batch_sizes = coverage.batch_sizes
    knobs = args.freqs or coverage.knobs
    _header, numbered, comments = read_rows(args.profile)
    rows = [row for _lineno, row in numbered]
    try:
        prediction = predict_profile(rows, batch_sizes, knobs)
    except PredictError as exc:
        raise InputError(f"{args.profile}: too few or unusable probes to predict: {exc}") from None
    grid = [
        "grid_batch_sizes=" + ",".join(str(b) for b in batch_sizes),
        "grid_freqs=" + ",".join(f"{k:g}" for k in knobs),
    ]
    kept = [c for c in comments if not c.startswith(("grid_batch_sizes=", "grid_freqs="))]
    write_rows(args.out, prediction.rows, kept + grid + describe(prediction))
    summary = {
        "path": args.out,
        "profile": args.profile,
        "rows": len(prediction.rows),
        "measured": prediction.measured,
        "predicted": prediction.predicted,
        "methods": prediction.methods,
        "cv_mean_rel_err": prediction.errors,
        "candidates": prediction.candidates,
        "peak_power_bound_margin": prediction.margin,
    }
    if args.next:
        summary["next_probes"] = [
            {"batch_size": b, "freq_mhz": k} for b, k in _next(args, prediction, batch_sizes)
        ]
    if args.json:
        emit_json(summary)
        return 0
    console.print(
        table(
            f"Prediction for {args.profile}",
            ["column", "model", "CV mean rel. err", "candidates (CV err)"],
            [
                [q, m, prediction.errors.get(q), _candidates(prediction.candidates.get(q, {}))]
                for q, m in prediction.methods.items()
            ],
        )
    )
    if prediction.margin is not None:
        console.print(
            f"predicted peak power carries an upper bound {100 * prediction.margin:.2f} % above "
            "the plausible models (peak_power_bound_w); selection holds budgets to it"
        )
    for probe in summary.get("next_probes", []):
        console.print(f"probe next: batch_size={probe['batch_size']} knob={probe['freq_mhz']:g}")
    console.print(
        f"kept {prediction.measured} measured rows, predicted {prediction.predicted}; "
        f"wrote {args.out}"
    )
    return 0


def _candidates(errors: dict[str, float]) -> str:
    return ", ".join(f"{m} {e:.4f}" for m, e in sorted(errors.items(), key=lambda x: x[1]))


def _next(args: argparse.Namespace, prediction, batch_sizes: list[int]) -> list[tuple]:
    """The adaptive design's next probes (``fleet.agent.prediction.adapt``) at the user's
    budgets."""
    from fleet.agent.prediction.adapt import next_probes
    from fleet.cli.common import parse_budgets
    from fleet.core.efficiency import load_efficiency

    if args.next < 0:
        raise InputError(f"--next: expected a count >= 0, got {args.next}")
    if not args.budgets:
        raise InputError("--next needs --budgets (the budgets the choice must be right at)")
    budgets = parse_budgets(args.budgets, "--budgets")
    if args.efficiency:
        reached = load_efficiency(args.efficiency).reached
    else:
        reached = {b: 1.0 for b in batch_sizes}  # no efficiency: time per sample decides
    return next_probes(prediction.rows, budgets, [reached], args.next, prediction.margin or 0.0)
