"""Real learning on a simulated device: train on the CPU, keep time on the device's clock.

The host-training runner of the device round (``fleet.rounds.device_round``): the round has selected
(b, f) with the shipped efficiency; this runner fine-tunes the shipped weights on the device's
own data at batch b with the learning rate the rule gives, counts the samples until the
target, and hands that one-batch-size trace to the virtual clock, which charges
``samples x profiled time per sample`` at (b, f) and the energy at the profiled mean power. The
host CPU's own speed never enters the numbers, so a laptop simulates a Nano honestly.

The batch size stays the one chosen at the start (changing it mid-run would change the training
itself); a budget schedule still applies through the clock: each segment re-picks the fastest
frequency for that batch within the budget in force, or pauses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.method.agent_records import STATUS_OVER_BUDGET, STATUS_REACHED
from fleet.method.selection import scaled_lr
from fleet.rounds.device_round import DeviceResult, Round, run_device
from fleet.rounds.host_learning import LearnedBatch
from fleet.rounds.learning import ReplayLearning
from fleet.rounds.virtual_clock import VirtualClock, cached_profile
from fleet.training.task import build_for, load_task


@dataclass
class HostTraining:
    """Runner: train on this host, time on the device's profile. ``trained`` holds the weights."""

    weights: dict[str, Any] | None = None
    data_dir: str | None = None
    trained: dict[str, Any] | None = None
    learning: str | None = "train"
    truth: Efficiency | None = None  # known only for the batch size trained: no baselines

    def run(self, rnd: Round, res: DeviceResult) -> None:
        spec, run, b = rnd.spec, rnd.run, rnd.first.batch_size
        if not spec.data:
            raise InputError(f"device {spec.name}: learning = 'train' needs a data entry")
        task = load_task(spec.data, self.data_dir, seed=run.seed)
        model = build_for(task, run.model, run.seed, self.weights)
        learning = ReplayLearning.create(rnd)
        if learning is not None:
            self._learning_run(rnd, res, task, model, learning)
            return
        lr = scaled_lr(b, run.lr_ref_batch, run.lr_ref, run.optimizer)
        out = self._train(run, task, model, b, lr)
        if out.samples_to_accuracy == 0:
            # the shipped (pre-trained) model already meets the target on this device's data
            res.time_s = res.energy_j = res.samples = 0.0
            res.accuracy, res.message = out.final_accuracy, "the shipped model meets the target"
            res.accuracy_source = "measured"
            return
        n = float(out.samples_to_accuracy) if out.samples_to_accuracy else math.nan
        clock = VirtualClock(Efficiency({b: n}, source=f"trained:{spec.data}"), batch_size=b)
        clock.run(rnd, res)
        if res.status == "ok":
            res.accuracy, res.accuracy_source = out.final_accuracy, "measured"
            res.message = ""
        elif res.status == "not reached":
            # it trained (and drew power) until the cap: charge the clock for what it did
            res.samples = float(out.samples)
            res.time_s = out.samples * rnd.first.time_per_batch_s / b
            res.energy_j = res.time_s * rnd.first.mean_power_w
            res.accuracy, res.accuracy_source = out.final_accuracy, "measured"
            res.message = (
                f"target {run.target_accuracy:g} not reached within {out.samples} samples "
                f"(best {out.best_accuracy:.3f})"
            )

    def _train(self, run: Any, task: Any, model: Any, b: int, lr: float, control: Any = None):
        """Fine-tune to the target on the host (one trainer call for both paths); keeps the
        trained weights. ``control`` (a learning device) chooses the batch size as it goes."""
        from fleet.agent.training.plan import TrainHooks, TrainPlan
        from fleet.agent.training.train_state import TrainerError
        from fleet.agent.training.trainer import train_to_target

        plan = TrainPlan(
            b, lr, run.target_accuracy, optimizer=run.optimizer,
            eval_every_samples=run.eval_every_samples, max_samples=run.max_samples,
            seed=run.seed, task=task.kind,
        )  # fmt: skip
        try:
            out = train_to_target(
                model, task.train, task.test, plan, TrainHooks(controller=control)
            )
        except TrainerError as exc:
            raise InputError(str(exc)) from None
        self.trained = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return out

    def _learning_run(
        self, rnd: Round, res: DeviceResult, task: Any, model: Any, learning: Any
    ) -> None:
        """Train with the learner choosing the batch size (``host_learning.LearnedBatch``): the
        reference pair is the fleet's, every switch rescales the learning rate."""
        run = rnd.run
        control = LearnedBatch(rnd, learning, rnd.first)
        out = self._train(run, task, model, run.lr_ref_batch, run.lr_ref, control)
        control.fill(res)
        res.accuracy, res.accuracy_source = out.final_accuracy, "measured"
        if out.status == STATUS_REACHED:
            res.status = "ok"
        elif out.status == STATUS_OVER_BUDGET:
            res.status = "infeasible"
            res.message = "the budget schedule left no feasible point before the target"
        else:
            res.status = "not reached"
            res.message = (
                f"target {run.target_accuracy:g} not reached within {out.samples} samples "
                f"(best {out.best_accuracy:.3f})"
            )
        learning.report(res)


def train_device(
    spec: DeviceSpec,
    shipped: Efficiency,
    run: RunSettings,
    weights: dict[str, Any] | None = None,
    data_dir: str | None = None,
) -> tuple[DeviceResult, dict[str, Any] | None]:
    """One device round with real training; returns the row and the fine-tuned weights."""
    runner = HostTraining(weights, data_dir)
    try:
        profile, index = cached_profile(spec.profile)
    except InputError as exc:
        return DeviceResult.for_device(
            spec, shipped.source, learning="train", message=str(exc)
        ), None
    row = run_device(spec, profile, shipped, run, runner, index=index)
    return row, runner.trained
