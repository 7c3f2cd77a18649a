"""Real learning on a simulated device: train on the CPU, keep time on the device's clock.

The replay device normally reads how many samples it needs from a recorded trace. Here it
trains for real instead: select (b, f) with the shipped efficiency, fine-tune the shipped
weights on the device's own data at batch b with the learning rate the rule gives, count the
samples until the target, and charge the virtual clock ``samples x profiled time per sample`` at
(b, f) and the energy at the profiled mean power. The host CPU's own speed never enters the
numbers, so a laptop simulates a Nano honestly.

The batch size stays the one chosen at the start (changing it mid-run would change the training
itself); a budget schedule still applies through the clock: each segment re-picks the fastest
frequency for that batch within the budget in force, or pauses.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.efficiency import Efficiency, scaled_lr
from fleet.errors import InfeasibleError, InputError
from fleet.fleetconfig import DeviceSpec, RunSettings
from fleet.replay import DeviceResult, cached_profile, replay_device
from fleet.selection import align
from fleet.task import build_for, load_task


def train_device(
    spec: DeviceSpec,
    shipped: Efficiency,
    run: RunSettings,
    weights: dict[str, Any] | None = None,
    data_dir: str | None = None,
) -> tuple[DeviceResult, dict[str, Any] | None]:
    """One device round with real training; returns the row and the fine-tuned weights."""
    from fleet.agent.trainer import TrainerError, train_to_target

    def failed(status: str, message: str) -> tuple[DeviceResult, None]:
        return (
            DeviceResult(
                spec.name,
                spec.device_type,
                spec.budget_w,
                spec.profile,
                shipped.source,
                status,
                message=message,
                learning="train",
            ),
            None,
        )

    try:
        profile, index = cached_profile(spec.profile)
        profile, shipped_a, _ = align(profile, shipped)
        first_budget = spec.schedule[0].budget_w if spec.schedule else spec.budget_w
        choice = index.select(shipped_a, first_budget, run.objective)
    except InfeasibleError as exc:
        return failed("infeasible", str(exc))
    except InputError as exc:
        return failed("error", str(exc))
    if not spec.data:
        return failed("error", f"device {spec.name}: learning = 'train' needs a data entry")
    try:
        task = load_task(spec.data, data_dir, seed=run.seed)
        model = build_for(task, run.model, run.seed, weights)
    except InputError as exc:
        return failed("error", str(exc))
    b = choice.batch_size
    lr = scaled_lr(b, run.lr_ref_batch, run.lr_ref, run.optimizer)
    extra = run.extra
    try:
        res = train_to_target(
            model,
            task.train,
            task.test,
            b,
            lr,
            run.target_accuracy,
            optimizer=run.optimizer,
            eval_every_samples=_opt_int(extra.get("eval_every_samples")),
            max_samples=_opt_int(extra.get("max_samples")),
            seed=run.seed,
            task=task.kind,
        )
    except TrainerError as exc:
        return failed("error", str(exc))
    n = float(res.samples_to_accuracy) if res.samples_to_accuracy else math.nan
    trace = Efficiency({b: n}, source=f"trained:{spec.data}")
    row = replay_device(
        spec,
        profile.restrict([b]),
        shipped_a.restrict([b]),
        trace,
        run.target_accuracy,
        run.objective,
        baselines=False,
    )
    row.learning = "train"
    row.efficiency = shipped.source
    if row.status == "ok":
        row.accuracy = res.final_accuracy
    elif row.status == "not reached":
        # it trained (and drew power) until the cap: charge the clock for what it did
        row.samples = float(res.samples)
        row.time_s = res.samples * choice.time_per_batch_s / b
        row.energy_j = row.time_s * choice.mean_power_w
        row.accuracy = res.final_accuracy
        row.message = (
            f"target {run.target_accuracy:g} not reached within {res.samples} samples "
            f"(best {res.best_accuracy:.3f})"
        )
    return row, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _opt_int(v: object) -> int | None:
    return None if v is None else int(v)  # type: ignore[call-overload]
