"""`powerfleet profile`: measure a model's time and power LUT on this device (paper §4.1).

Runs the agent's profiler in-process (the agent is plain importable code; the JSON-lines
subprocess is only needed when the device's Python differs from the coordinator's). With
``--budget-w`` the staircase plan probes only the points near the budget's frontier.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
from typing import Any

from fleet.agent.devices import (
    DeviceError,
    add_backend_arguments,
    given_options,
    open_backend,
    options_for,
    preferred_torch_device,
)
from fleet.agent.devices.guard import install_restore_handlers
from fleet.agent.measure import sweep_plan
from fleet.cli import checks
from fleet.cli.common import (
    console,
    emit_json,
    model_help,
    parse_budgets,
    table,
    warn_other_model,
)
from fleet.common.errors import InputError
from fleet.method.budget import parse_budget
from fleet.method.power_window import MIN_SAMPLER_HZ
from fleet.method.profile_io import PREDICTED

DEFAULT_BATCH_SIZES = ",".join(str(b) for b in sweep_plan.DEFAULT_BATCH_SIZES)
MAX_CLASSES = 1_000_000  # a classifier head beyond this is a typo (3e9 tried to allocate 6 TB)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="measure time per batch and peak/mean power for each batch size and GPU frequency",
    )
    add_backend_arguments(p)  # --backend and every backend's own options, from their SPECs
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument(
        "--input-shape", help="per-sample input shape, e.g. 3x32x32 or 64 (default: model's)"
    )
    p.add_argument(
        "--batch-sizes", type=checks.number_list(True),
        help=f"comma-separated (default {DEFAULT_BATCH_SIZES})",
    )  # fmt: skip
    p.add_argument(
        "--freqs", type=checks.number_list(False),
        help="comma-separated MHz to probe (default: all the device offers)",
    )  # fmt: skip
    p.add_argument("--budget-w", help="power budget in watts: probe only the staircase under it")
    p.add_argument(
        "--predict", action="store_true",
        help="probe a small design (a quarter of the grid) and predict the rest",
    )  # fmt: skip
    p.add_argument("--max-probes", type=int, help="with --predict: most points to probe")
    p.add_argument(
        "--adapt-budgets",
        help="with --predict: after the design, probe where the choice at these budgets (W, "
        "comma-separated) is in doubt",
    )
    p.add_argument(
        "--adapt-probes", type=int, help="with --adapt-budgets: most extra probes (default 1/10)"
    )
    p.add_argument(
        "--adapt-efficiency",
        type=checks.input_file("efficiency CSV"),
        help="with --adapt-budgets: efficiency CSV the choice is made with",
    )
    p.add_argument(
        "--steps", type=int,
        help=f"timed training steps per point (default {sweep_plan.DEFAULT_STEPS})",
    )  # fmt: skip
    p.add_argument(
        "--warmup", type=int,
        help=f"untimed warm-up steps per point (default {sweep_plan.DEFAULT_WARMUP})",
    )  # fmt: skip
    p.add_argument(
        "--sampler-hz", type=float, help=f"power sampling rate (>= {MIN_SAMPLER_HZ:g}, the default)"
    )
    p.add_argument(
        "--min-point-s", type=float,
        help="each point runs at least this long (default 2 s, or twice the power statistic's "
        "averaging window)",
    )  # fmt: skip
    p.add_argument(
        "--min-power-samples", type=int, help="each point holds at least this many power "
        "samples (default 40)",
    )  # fmt: skip
    p.add_argument("--num-classes", type=int, help="classes (vocabulary size for text models)")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="torch device (auto: the backend's own, e.g. cuda on jetson/nvml, when torch sees it)",
    )  # fmt: skip
    p.add_argument(
        "--out", required=True, type=checks.output_file("profile CSV"), help="profile CSV to write"
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def _adapt_args(args: argparse.Namespace) -> tuple[list[float | None] | None, dict | None]:
    """The adaptive probes' budgets and efficiency, checked before any probe."""
    from fleet.core.efficiency import load_efficiency

    if args.adapt_budgets is None:
        if args.adapt_probes is not None or args.adapt_efficiency:
            raise InputError("--adapt-probes and --adapt-efficiency apply to --adapt-budgets")
        return None, None
    if not args.predict:
        raise InputError("--adapt-budgets applies to --predict")
    if args.adapt_probes is not None and args.adapt_probes < 0:
        raise InputError(f"--adapt-probes must be >= 0, got {args.adapt_probes}")
    budgets = parse_budgets(args.adapt_budgets, "--adapt-budgets")
    eff = load_efficiency(args.adapt_efficiency).reached if args.adapt_efficiency else None
    return budgets, eff


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    """The backend flags ``profile`` takes, for other commands that open a backend (``train``)."""
    add_backend_arguments(parser)


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen backend's options from its flags; a flag it cannot use is a user error."""
    try:
        return options_for(args.backend, given_options(args))
    except DeviceError as exc:
        raise InputError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from fleet.agent.measure.profile_writer import write_profile
    from fleet.agent.measure.profiler import profile_grid, require_power
    from fleet.agent.models import inputs as models
    from fleet.agent.prediction.fit import PredictError

    batch_sizes = args.batch_sizes or list(sweep_plan.DEFAULT_BATCH_SIZES)
    freqs = args.freqs
    budget = parse_budget(args.budget_w, "--budget-w") if args.budget_w is not None else None
    if args.predict and budget is not None:
        raise InputError("--predict fills the whole grid; it does not combine with --budget-w")
    if args.max_probes is not None and not args.predict:
        raise InputError("--max-probes applies to --predict")
    adapt_budgets, adapt_eff = _adapt_args(args)
    measuring = _measuring_flags(args)  # before the defaults fill them in
    args.steps = sweep_plan.DEFAULT_STEPS if args.steps is None else args.steps
    args.warmup = sweep_plan.DEFAULT_WARMUP if args.warmup is None else args.warmup
    args.sampler_hz = MIN_SAMPLER_HZ if args.sampler_hz is None else args.sampler_hz
    if args.steps < 1:
        raise InputError(f"--steps must be >= 1, got {args.steps}")
    if args.warmup < 0:
        raise InputError(f"--warmup must be >= 0, got {args.warmup}")
    if not (math.isfinite(args.sampler_hz) and args.sampler_hz >= MIN_SAMPLER_HZ):
        raise InputError(
            f"--sampler-hz must be >= {MIN_SAMPLER_HZ:g} (as train's: the budget statistic is "
            f"the same at both), got {args.sampler_hz}"
        )
    if args.num_classes is not None and not 2 <= args.num_classes <= MAX_CLASSES:
        raise InputError(f"--num-classes must be in [2, {MAX_CLASSES:,}], got {args.num_classes}")
    if args.min_point_s is not None and not (
        math.isfinite(args.min_point_s) and args.min_point_s >= 0
    ):
        raise InputError(
            f"--min-point-s must be a finite number >= 0 (seconds), got {args.min_point_s}"
        )
    if args.min_power_samples is not None and args.min_power_samples < 0:
        raise InputError(f"--min-power-samples must be >= 0, got {args.min_power_samples}")
    try:
        model = models.canonical_name(args.model)
        shape = models.format_shape(models.input_spec(model, args.input_shape).shape)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    options = backend_options(args)

    try:
        backend = open_backend(args.backend, **options)
        require_power(backend)  # a board without a power sensor: one line, before any note
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    shape = _replayed(args, backend, model, shape, batch_sizes, measuring)
    device = args.device
    if device == "auto":
        device = preferred_torch_device(args.backend)
        if device == "cpu" and preferred_torch_device(args.backend, True) != "cpu":
            # A copied sysfs tree on a workstation: clocks and rails are real files, the
            # training steps run on the CPU. Say so rather than fail or pretend.
            print(
                "powerfleet profile: note: torch sees no CUDA GPU; training steps run on the "
                "CPU (pass --device cuda to require the GPU)",
                file=sys.stderr,
            )
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    uninstall = install_restore_handlers(backend)
    progress_console = Console(stderr=True)
    try:
        with Progress(
            TextColumn("[bold]profile[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=progress_console,
            transient=True,
            disable=not progress_console.is_terminal,
        ) as bar:
            task = bar.add_task(f"{model} {shape}", total=None)

            def on_progress(done: int, total: int, row: dict[str, Any] | None) -> None:
                label = f"{model} {shape}"
                if row is not None:
                    label += f"  b={row['batch_size']} f={row['freq_mhz']:g} {row['status']}"
                bar.update(task, completed=done, total=total, description=label)

            plan = sweep_plan.SweepPlan(
                model,
                input_shape=shape,
                batch_sizes=batch_sizes,
                freqs=freqs,
                steps=args.steps,
                warmup=args.warmup,
                budget_w=budget,
                sampler_hz=args.sampler_hz,
                num_classes=args.num_classes,
                min_window_s=args.min_point_s,
                min_power_samples=args.min_power_samples,
            )
            predict = None
            if args.predict:
                predict = sweep_plan.PredictPlan(
                    max_probes=args.max_probes,
                    adapt_budgets=adapt_budgets,
                    adapt_efficiency=adapt_eff,
                    adapt_probes=args.adapt_probes,
                )
            result = profile_grid(backend, plan, predict, device=device, progress=on_progress)
    except PredictError as exc:
        raise InputError(f"--predict: {exc}") from None
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    finally:
        uninstall()  # profile_grid has already given the device back on every path
    write_profile(args.out, result.rows, result.metadata)

    failed = [r for r in result.rows if r["status"] != "ok"]
    summary = {
        "path": args.out,
        "rows": len(result.rows),
        "probes": result.probes,
        "grid_size": result.grid_size,
        "saved": result.grid_size - result.probes,
        "failed": len(failed),
        "backend": args.backend,
        "device": result.metadata.get("device"),
        "model": model,
        "input_shape": shape,
        "plan": result.metadata.get("plan"),
        "budget_w": budget,
        "predicted": sum(1 for r in result.rows if r.get("source") == PREDICTED),
        "idle_power_w": result.metadata.get("idle_power_w"),  # None: no power reading
        # measured, replayed, or virtual (a virtual board: the host's times, and which host)
        "source": result.metadata.get("source"),
        "host": result.metadata.get("host") or socket.gethostname(),
    }
    if args.json:
        emit_json(summary)
        return 0
    console.print(
        table(
            f"Profile of {model} ({shape}) on {summary['device']} [{args.backend}]",
            ["batch", "freq MHz", "time/batch s", "peak W", "mean W", "steps", "status"],
            [
                [
                    r["batch_size"],
                    r["freq_mhz"],
                    r["time_per_batch_s"],
                    r["peak_power_w"],
                    r["mean_power_w"],
                    r.get("samples"),
                    r["status"] if r["status"] != "ok" else r.get("source", "ok"),
                ]
                for r in result.rows
            ],
        )
    )
    saved = f", {summary['saved']} saved by the staircase" if budget is not None else ""
    if args.predict:
        saved = f", {summary['predicted']} predicted"
    console.print(
        f"probed {result.probes} of {result.grid_size} grid points{saved}; wrote {args.out}"
    )
    if summary["source"] == "virtual":
        console.print(f"source virtual: times are the host's ({summary['host']}), not the board's")
    if failed:
        print(
            f"powerfleet profile: note: {len(failed)} point(s) could not run "
            f"({', '.join(sorted(set(r['status'] for r in failed)))})",
            file=sys.stderr,
        )
    return 0


def _measuring_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that size a measurement (steps, warm-up, sampling, a point's length)."""
    given = (
        ("--steps", args.steps),
        ("--warmup", args.warmup),
        ("--sampler-hz", args.sampler_hz),
        ("--min-point-s", args.min_point_s),
        ("--min-power-samples", args.min_power_samples),
    )
    return [flag for flag, value in given if value is not None]


def _replayed(
    args: argparse.Namespace,
    backend: Any,
    model: str,
    shape: str,
    batch_sizes: list[int],
    measuring: list[str],
) -> str:
    """A replayed file's numbers are of the model and input shape it recorded: its shape is the
    profile's (``--input-shape`` naming another is refused: it relabelled the recorded rows),
    another model is said (not refused, as ``train`` says it), and writing over the replayed
    file itself is refused. A batch size the
    file never recorded is refused, as a clock it never recorded is (it came back as rows
    ``unavailable``, said nowhere with ``--json``). A flag that sizes a measurement is refused:
    a replay measures nothing, and a ``--steps 50`` that changed nothing looked like it had."""
    from fleet.agent.models import inputs as models

    recorded = getattr(backend, "recorded", None)
    if recorded is None:
        return shape
    if measuring:
        raise InputError(
            f"{', '.join(measuring)}: a replay measures nothing (it returns --profile-csv's "
            "recorded numbers); drop the flag or profile with a measuring backend"
        )
    unknown = sorted(set(batch_sizes) - set(backend.batch_sizes()))
    if unknown and args.batch_sizes is not None:  # the default list asks for no particular one
        raise InputError(
            f"--batch-sizes: {', '.join(map(str, unknown))} not in --profile-csv "
            f"{backend.profile_csv} (it holds {', '.join(map(str, backend.batch_sizes()))})"
        )
    if args.out and os.path.exists(args.out) and os.path.samefile(args.out, backend.profile_csv):
        raise InputError(f"--out {args.out} is the replayed --profile-csv; write another file")
    was = recorded.get("model", "")
    warn_other_model("profile", "--profile-csv", backend.profile_csv, was, model)
    if not recorded.get("input_shape"):
        return shape
    try:
        kept = models.format_shape(models.input_spec(model, recorded["input_shape"]).shape)
    except ValueError:
        return shape  # a shape this model cannot take: the model's own, as before
    if args.input_shape is not None and shape != kept:  # its rows would be relabelled
        raise InputError(
            f"--input-shape {shape}: --profile-csv {backend.profile_csv} recorded {kept}; a "
            "replay's numbers are of the shape it recorded (drop --input-shape)"
        )
    return kept
