"""`powerfleet train`: the paper's whole workflow on one board, no coordinator needed.

Profile (unless a LUT is given), select, lock, fine-tune under the closed loop, restore. The loop
itself lives in the agent (``fleet.agent.loop.closedloop``) so the hardware client drives the very
same code through the agent's ``train`` command; this module only parses, prints and writes the
run folder. The device is restored on every exit path (normal end, error, Ctrl-C, SIGTERM): the
closed loop restores when its block ends and ``install_restore_handlers`` covers signals.
See ``docs/architecture.md`` (closed loop).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

from rich.console import Console

from fleet.agent.devices import DeviceError, open_backend
from fleet.agent.devices.board_identity import run_origin
from fleet.agent.devices.guard import install_restore_handlers
from fleet.agent.measure import sweep_plan
from fleet.cli import checks
from fleet.cli.cmd_profile import add_backend_flags, backend_options
from fleet.cli.common import emit_json, model_help, note, warn_other_model
from fleet.cli.train_output import forecast_notes, print_human, train_report
from fleet.common.errors import InputError
from fleet.method.agent_records import STATUS_ERROR
from fleet.method.deadline import check_power
from fleet.method.power_window import MIN_SAMPLER_HZ
from fleet.method.selection import MAX_LR

DEFAULT_BATCH_SIZES = ",".join(str(b) for b in sweep_plan.DEFAULT_BATCH_SIZES)
COMMAND = "train"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="profile if needed, select, lock and fine-tune on this board under a power budget "
        "(closed loop: budget changes re-select, a runtime guard steps the clock down)",
    )
    add_backend_flags(p)  # --backend and every backend's options, from the registry
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument(
        "--weights",
        type=checks.input_file("weights"),
        help="pre-trained weights (powerfleet pretrain)",
    )
    p.add_argument("--dataset", required=True, help="prepared dataset name or a path")
    p.add_argument("--data-dir", help="prepared-data directory (default: $POWERFLEET_DATA)")
    p.add_argument("--subset", type=int, help="samples to use (deterministic)")
    p.add_argument(
        "--efficiency",
        required=True,
        type=checks.input_file("efficiency CSV"),
        help="efficiency CSV (powerfleet estimate)",
    )
    p.add_argument(
        "--profile",
        type=checks.input_file("profile CSV"),
        help="profile CSV of this board (default: profile first)",
    )
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget-w", help="fixed budget in watts (or 'none')")
    budget.add_argument(
        "--budget-schedule", help="SECONDS:WATTS steps from 0 s, in order, e.g. '0:7,600:4.5'"
    )
    budget.add_argument("--budget-file", help="file holding the budget, re-read every second")
    budget.add_argument(
        "--budget-trace",
        help="power trace CSV (time_s, available_w): its budget schedule, as a fleet file's "
        "budget_trace gives (see also `powerfleet budget-feed` for a live file)",
    )
    p.add_argument(
        "--budget-dwell-s", type=float, help="--budget-trace: least time between rises (60 s)"
    )
    p.add_argument(
        "--objective",
        choices=("time", "energy", "deadline"),
        default="time",
        help="what to minimise: time to target, energy, or energy within --deadline-s",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        help="deadline objective: finish within this many seconds of the loop's start on the "
        "least predicted energy (the fastest point, 'late', when nothing can)",
    )
    p.add_argument("--target-accuracy", type=float, default=0.9, help="accuracy to reach (0-1)")
    p.add_argument(
        "--learn-efficiency",
        choices=("none", "online", "device", "all"),
        default="online",
        help="correct the shipped samples-to-target while training: from the learning curve "
        "(online, the default), the gradient noise scale of the steps (device), both (all), or "
        "not at all (none: Algorithm 1 as shipped)",
    )
    p.add_argument("--max-samples", type=int, help="stop here if the target is not met")
    p.add_argument("--eval-every", type=int, help="samples between evaluations (default: epoch)")
    p.add_argument(
        "--optimizer", default="adam", choices=["adam", "adamw", "sgd"], help="optimizer"
    )
    p.add_argument("--lr-ref", type=float, default=5e-4, help="learning rate at --lr-ref-batch")
    p.add_argument(
        "--lr-ref-batch", type=int, default=128, help="batch size --lr-ref is for (lr scales)"
    )
    p.add_argument("--seed", type=int, default=0, help="initialisation and order seed")
    p.add_argument(
        "--batch-sizes",
        type=checks.number_list(True),
        help=f"to profile (no --profile; default {DEFAULT_BATCH_SIZES})",
    )
    p.add_argument("--guard-window", type=float, default=0.2, help="seconds over budget to act")
    p.add_argument(
        "--sampler-hz", type=float, default=MIN_SAMPLER_HZ,
        help=f"power sampling rate (>= {MIN_SAMPLER_HZ:g})",
    )  # fmt: skip
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="torch device (auto: cuda on jetson/nvml when torch sees one, else cpu)",
    )  # fmt: skip
    p.add_argument(
        "--drift-time-tol", type=float, default=0.10, help="step-time deviation that is drift"
    )
    p.add_argument(
        "--drift-power-tol", type=float, default=0.08, help="peak-power deviation that is drift"
    )
    p.add_argument("--no-drift", action="store_true", help="do not compare steps with the LUT")
    p.add_argument(
        "--refreshed-profile",
        type=checks.output_file("profile CSV"),
        help="where a drift-refreshed profile goes (default: <out>/profile.refreshed.csv)",
    )
    p.add_argument(
        "--pace-to-profile", action="store_true",
        help="rehearsal: every step lasts at least the profile's step time at its point, so a "
        "faster host (or a virtual board) lives the board's timeline: schedules, deadlines",
    )  # fmt: skip
    p.add_argument(
        "--out",
        type=checks.output_dir("run folder"),
        help="run folder: run.json, checkpoint, weights, profile",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------- inputs


def _budget_source(args: argparse.Namespace) -> Any:
    """The budget source, read by the kernel's grammar (``fleet.method.budget``) under the flags'
    names; a trace becomes a schedule's steps directly (no text in between)."""
    from fleet.method.budget import make_source

    schedule = args.budget_schedule
    if args.budget_trace is not None:
        from fleet.budgets.trace import DEFAULT_DWELL_S, schedule_from_trace

        dwell = DEFAULT_DWELL_S if args.budget_dwell_s is None else args.budget_dwell_s
        schedule = schedule_from_trace(  # from the trace's first reading: no start to name
            args.budget_trace, dwell, "--budget-trace", names=("--budget-dwell-s", "start")
        )
    elif args.budget_dwell_s is not None:
        raise InputError("--budget-dwell-s: only with --budget-trace")
    return make_source(
        args.budget_w, schedule, args.budget_file,
        warn=lambda m: note(COMMAND, "warning: " + m),
        names=("--budget-w", "--budget-schedule", "--budget-file"),
    )  # fmt: skip


def _efficiency(path: str, model: str) -> tuple[dict[int, float], dict[str, Any]]:
    """The shipped vector and what the learner needs of it (its spread, its origin)."""
    from fleet.core.efficiency import load_efficiency

    eff = load_efficiency(path)
    warn_other_model(COMMAND, "--efficiency", path, eff.metadata.get("model", ""), model)
    if not eff.reached:
        raise InputError(f"{path}: no batch size reached the target accuracy")
    rel = {b: eff.std[b] / n for b, n in eff.reached.items() if b in eff.std and n > 0}
    return dict(eff.reached), {"rel_std": rel, "source": eff.metadata.get("source")}


def _lut_from_profile(path: str, model: str) -> list[Any]:
    from fleet.core.profile import load_profile

    profile = load_profile(path)
    warn_other_model(COMMAND, "--profile", path, profile.metadata.get("model", ""), model)
    return list(profile.points)


def _check_args(args: argparse.Namespace) -> None:
    if not 0.0 <= args.target_accuracy <= 1.0:
        raise InputError(f"--target-accuracy must be in [0, 1], got {args.target_accuracy}")
    counts = (
        ("--max-samples", args.max_samples),
        ("--eval-every", args.eval_every),
        ("--lr-ref-batch", args.lr_ref_batch),
        ("--subset", args.subset),
    )
    for flag, value in counts:
        if value is not None and value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    if not 0 < args.lr_ref <= MAX_LR:  # NaN fails too
        raise InputError(f"--lr-ref must be > 0 and <= {MAX_LR:g}, got {args.lr_ref}")
    if not (math.isfinite(args.sampler_hz) and args.sampler_hz >= MIN_SAMPLER_HZ):
        raise InputError(
            f"--sampler-hz must be >= {MIN_SAMPLER_HZ:g} (the guard needs it), "
            f"got {args.sampler_hz}"
        )
    if not (math.isfinite(args.guard_window) and 0 <= args.guard_window <= 0.4):
        raise InputError(f"--guard-window must be in [0, 0.4] s, got {args.guard_window}")
    for flag, tol in (("--drift-time-tol", args.drift_time_tol),
                      ("--drift-power-tol", args.drift_power_tol)):  # fmt: skip
        if not (math.isfinite(tol) and tol > 0):
            raise InputError(f"{flag} must be > 0, got {tol}")
    if args.objective == "deadline":
        if args.deadline_s is None:
            raise InputError("--objective deadline needs --deadline-s SECONDS")
        if not (math.isfinite(args.deadline_s) and args.deadline_s > 0):
            raise InputError(
                f"--deadline-s must be a positive number of seconds, got {args.deadline_s}"
            )
    elif args.deadline_s is not None:
        raise InputError("--deadline-s is only for --objective deadline")
    if args.batch_sizes is not None:
        if args.profile:  # a flag that changes nothing is said, not lost
            note(COMMAND, "warning: --batch-sizes is for profiling first; the run chooses "
                 "among --profile's batch sizes")  # fmt: skip
    for flag, path in (("--efficiency", args.efficiency), ("--profile", args.profile),
                       ("--weights", args.weights)):  # fmt: skip
        if path is not None and not os.path.isfile(path):
            raise InputError(f"{flag}: {path} not found")


def _torch_device(args: argparse.Namespace) -> str:
    if args.device != "auto":
        return args.device
    if args.backend not in ("jetson", "nvml"):
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    note(COMMAND, "torch sees no CUDA GPU; training runs on the CPU (--device cuda to require it)")
    return "cpu"


# ---------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> int:
    _check_args(args)  # bad input is refused before torch is even imported
    source = _budget_source(args)
    efficiency, efficiency_meta = _efficiency(args.efficiency, args.model)

    from fleet.agent.loop.closedloop import ClosedLoopError
    from fleet.agent.loop.loop_plan import LoopPlan
    from fleet.agent.loop.underbudget import train_under_budget
    from fleet.agent.training.checkpoint import atomic_torch_save
    from fleet.agent.training.plan import TrainHooks, TrainPlan
    from fleet.agent.training.train_state import TrainerError
    from fleet.training.task import build_for, load_task

    points = _lut_from_profile(args.profile, args.model) if args.profile else None
    if points is not None and args.objective == "deadline":
        check_power(points, args.profile)
    options = backend_options(args)
    task = load_task(args.dataset, args.data_dir, args.subset, args.seed)
    model = build_for(task, args.model, args.seed, args.weights)
    device = _torch_device(args)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    try:
        backend = open_backend(args.backend, **options)
        if points is None:  # profiling first needs power; a recorded --profile does not
            from fleet.agent.measure.profiler import require_power

            require_power(backend)
        origin = run_origin(args.backend, backend.describe())  # source: measured, virtual, ...
    except DeviceError as exc:
        raise InputError(str(exc)) from None

    uninstall = install_restore_handlers(backend)
    err = Console(stderr=True)
    live = err.is_terminal and not args.json
    try:
        if points is None:
            points = _profile_first(args, backend, task, model, source, device)
            if args.objective == "deadline":
                check_power(points, "the profile just measured")
        last: dict[str, Any] = {}

        def progress(done: int, total: int, info: dict[str, Any]) -> None:
            last.update(info)
            if live:
                budget = last.get("budget_w")
                b, f = last.get("running_batch_size", "-"), last.get("running_freq_mhz", "-")
                err.print(
                    f"\r[bold]train[/] {done}/{total} samples  b={b} f={f} MHz  budget="
                    f"{'none' if budget is None else budget} W  acc={last.get('accuracy', '-')}",
                    end="", highlight=False,
                )  # fmt: skip

        ckpt = os.path.join(args.out, "checkpoint.pt") if args.out else None
        try:
            plan = TrainPlan(
                args.lr_ref_batch, args.lr_ref, args.target_accuracy, optimizer=args.optimizer,
                eval_every_samples=args.eval_every, max_samples=args.max_samples,
                seed=args.seed, task=task.kind,
            )  # fmt: skip
            loop_plan = LoopPlan(
                points, efficiency, source, objective=args.objective,
                deadline_s=args.deadline_s, guard_window_s=args.guard_window,
                drift=_drift_settings(args), pace=args.pace_to_profile,
                learn=args.learn_efficiency, efficiency_meta=efficiency_meta,
            )  # fmt: skip
            result, summary = train_under_budget(
                backend, model, task.train, task.test, plan, loop_plan, device=device,
                checkpoint_path=ckpt, log=lambda m: note(COMMAND, m),
                hooks=TrainHooks(sampler_hz=args.sampler_hz, progress=progress),
            )  # fmt: skip
        except (ClosedLoopError, TrainerError) as exc:
            raise InputError(str(exc)) from None
        finally:
            if live:
                err.print()
    finally:
        uninstall()
        backend.restore()
    out = train_report(result, summary, args, ckpt)
    out.update(origin)
    profile_read = args.profile or (args.out and os.path.join(args.out, "profile.csv"))
    if profile_read and os.path.isfile(profile_read):
        from fleet.trust.coverage import read_coverage

        for line in forecast_notes(out["segments"], read_coverage(profile_read)):
            note(COMMAND, line)
    if args.out:
        atomic_torch_save(
            {k: v.detach().cpu() for k, v in model.state_dict().items()},
            os.path.join(args.out, "weights.pt"),
        )
        with open(os.path.join(args.out, "run.json"), "w") as fh:
            json.dump(out, fh, indent=2, default=str)
    if args.json:
        emit_json(out)
    else:
        print_human(out)
    if out["status"] != STATUS_ERROR:
        return 0
    # a setting the device refused stopped the run: what it ran is written; one line says why
    if args.json:  # (the human output said it already)
        print(f"powerfleet train: {out['stop_reason']}", file=sys.stderr)
    return 2


def _drift_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The closed loop's drift watch: the profile's rows and header, tolerances, output path."""
    if args.no_drift:
        return {"off": True}
    out = args.refreshed_profile
    if out is None and args.out:
        out = os.path.join(args.out, "profile.refreshed.csv")
    settings: dict[str, Any] = {
        "out_path": out,
        "time_tol": args.drift_time_tol,
        "power_tol": args.drift_power_tol,
    }
    if args.profile:
        from fleet.agent.measure.drift import read_profile

        settings["rows"], settings["comments"] = read_profile(args.profile)
    return settings


def _profile_first(args, backend, task, model, source, device) -> list[Any]:
    """The staircase under the highest budget the run will face (all points if unbounded)."""
    from fleet.agent.measure.profile_writer import write_profile
    from fleet.agent.measure.profiler import profile_grid
    from fleet.method.selection import lut_from_rows

    highest = source.highest()
    under = f" (staircase under {highest:g} W)" if highest is not None else " (full grid)"
    note(COMMAND, "no --profile: profiling first" + under)
    try:
        plan = sweep_plan.SweepPlan(
            args.model, input_shape=task.input_shape,
            batch_sizes=args.batch_sizes or list(sweep_plan.DEFAULT_BATCH_SIZES),
            budget_w=highest,
            sampler_hz=args.sampler_hz, num_classes=task.classes,
        )  # fmt: skip
        result = profile_grid(backend, plan, device=device, model=model)
    except DeviceError as exc:
        raise InputError(str(exc)) from None
    if args.out:
        write_profile(os.path.join(args.out, "profile.csv"), result.rows, result.metadata)
    return lut_from_rows(result.rows, "profile just measured")  # a ChooseError is an InputError
