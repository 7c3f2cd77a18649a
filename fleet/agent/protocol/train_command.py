"""The agent's ``train`` command: fine-tune at a locked clock, or under the closed loop.

Why separate: training is the agent's one long command, with its own request (checked by
``train_args.py``), its own device handling (lock for the run, restore on every way out) and the
largest response; the dispatcher (``protocol.py``) only registers it. Python 3.6 compatible.
"""

import logging
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from fleet.agent.loop.loop_plan import LoopPlan
from fleet.agent.measure.sampler import sensor_hz
from fleet.agent.protocol.handler_api import (
    Context,
    bool_arg,
    int_arg,
    number,
    path_arg,
    request_of,
    torch_device,
)
from fleet.agent.protocol.train_args import closed_loop_args, load_train_data, segment_arg
from fleet.agent.protocol.wire import ProtocolError, error_line
from fleet.agent.training.plan import ProgressFn, TrainHooks, TrainPlan
from fleet.method.agent_records import TrainReply, TrainRequest
from fleet.method.power_window import MIN_SAMPLER_HZ
from fleet.method.records import Progress

log = logging.getLogger("fleet.agent")


def handle_train(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Fine-tune to the target accuracy at a locked frequency; the response is the TrainResult.

    Tensors travel as files (JSON lines cannot carry them cheaply): ``weights`` is a state_dict
    file (absent: the model's seeded initial weights), ``data`` a .pt file of
    ``{"train": (x, y), "test": (x, y)}``, ``out_weights`` where the fine-tuned state_dict goes.
    ``lr`` is used as given (the coordinator applies the batch-size rule). ``freq_mhz`` is locked
    for the whole run and the device restored afterwards, on errors too. ``time_s`` (training
    time, evaluation excluded, as the paper reports) and ``accuracy`` (final) are aliases the
    hardware client reads.

    Closed loop (``closedloop.py``): with ``budget_w`` (watts or "none"), ``budget_schedule``
    ("0:7,600:4.5") or ``budget_file`` plus ``profile`` (rows or a CSV path) and ``efficiency``
    ({batch: samples}, {"batch_sizes", "samples_to_accuracy"} lists, or a CSV path), optional
    ``objective`` (time|energy|deadline, the last with ``deadline_s``), ``guard_window_s`` and
    ``pace`` (true: every step lasts at least the profile's step time, a rehearsal's timeline):
    the agent selects, locks, follows the budget and guards the rail; ``lr_ref_batch``/``lr_ref``
    are the learning-rate reference pair (``batch_size``/``lr`` are refused: the loop chooses
    the batch). The response names the point chosen at the start (``start_batch_size``,
    ``start_freq_mhz``) and the one running at the end (``end_batch_size``, ``end_freq_mhz``)
    and adds ``segments``, ``guard_events``,
    ``drift_events``, ``loop_time_s``, ``loop_energy_j`` and ``notes``, and for the deadline
    ``predicted_finish_s``, ``late`` and ``behind_at_s``; ``status`` may be ``over-budget``
    (checkpoint kept).

    Segments: with ``segment_s`` (and ``checkpoint``) the call trains at least that many seconds
    of training time (the device's clock; paced with ``pace``), stops at the next evaluation,
    restores the clocks and replies ``status`` ``paused``; the next call with the same
    checkpoint resumes. Every counter of the reply is the run's, cumulative across calls (the
    closed loop's segments and events too), and ``progress`` is where the run stands, a
    ``fleet.method.records.Progress``.

    The request and the reply are the kernel's records (``TrainRequest``, ``TrainReply``): an
    argument the record does not know is refused in one line naming the closest one.
    """
    from fleet.agent.models.registry import MODELS, build_model, canonical_name
    from fleet.agent.training.checkpoint import atomic_torch_save, torch_load_cpu
    from fleet.agent.training.train_state import TrainerError
    from fleet.agent.training.trainer import train_to_target

    request = request_of(req, TrainRequest)
    model_arg = req.get("model")
    if not isinstance(model_arg, str) or not model_arg:
        raise ProtocolError("train needs 'model' (a model name)")
    name = canonical_name(model_arg)
    data_path = path_arg(req, "data", required=True)
    weights = path_arg(req, "weights")
    checkpoint = path_arg(req, "checkpoint")
    segment_s = segment_arg(req, checkpoint)
    out_weights = path_arg(req, "out_weights")
    target = number(req, "target_accuracy", required=True)
    freq = number(req, "freq_mhz")
    model_options = req.get("model_options") or {}
    if not isinstance(model_options, dict):
        raise ProtocolError("'model_options' must be an object, got {!r}".format(model_options))
    task = req.get("task") or ("char" if MODELS[name].kind == "text" else "classification")
    batch_size, lr = reference_pair(request, request.budgeted())
    loop_args = closed_loop_args(req)
    notes = []  # type: List[str]
    device = torch_device(ctx, req, notes)
    seed = int_arg(req, "seed") or 0

    train_set, test_set = load_train_data(str(data_path))
    shape = req.get("input_shape") or list(train_set[0].shape[1:])
    classes = number(req, "vocab_size", number(req, "num_classes"))
    model = build_model(
        name, num_classes=None if classes is None else int(classes), input_shape=shape,
        seed=seed, **model_options
    )  # fmt: skip
    if weights is not None:
        if not os.path.isfile(weights):
            raise ProtocolError("weights file {} not found".format(weights))
        state = torch_load_cpu(weights)
        if not isinstance(state, dict):
            raise ProtocolError("weights file {} must hold a state_dict".format(weights))
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise TrainerError(
                "weights {} do not fit {}: {}".format(weights, name, error_line(exc)[:300])
            ) from None

    progress = _progress_to(ctx)
    plan = TrainPlan(
        int(batch_size),
        float(lr),
        float(target),
        optimizer=str(req.get("optimizer") or "adam"),
        eval_every_samples=int_arg(req, "eval_every_samples"),
        max_samples=int_arg(req, "max_samples"),
        seed=seed,
        task=str(task),
        eval_batch_size=int_arg(req, "eval_batch_size"),
        eval_at_start=bool_arg(req, "eval_at_start", True),
        segment_s=segment_s,
    )
    # never faster than the board's sensor converts
    hz = sensor_hz(ctx.backend, float(number(req, "sampler_hz", MIN_SAMPLER_HZ)))

    # Every argument is checked above: from here on the device is locked, and restored on exit.
    backend = ctx.backend
    if loop_args is not None:
        job = _Job(name, str(task), str(device), notes, checkpoint, out_weights, hz)
        return _train_closed_loop(ctx, model, train_set, test_set, plan, loop_args, job)
    set_workload = getattr(backend, "set_workload", None)
    locked = None  # type: Optional[float]
    try:
        if freq is not None:
            locked = float(freq)  # set first: a lock that fails half-way is restored too
            backend.lock(locked)
        if callable(set_workload):
            set_workload(int(batch_size))  # the replay backend's power depends on it
        power_read = backend.read_power_w if backend.read_power_w() is not None else None
        hooks = TrainHooks(power_read=power_read, sampler_hz=hz, progress=progress)
        result = train_to_target(model, train_set, test_set, plan, hooks, str(device), checkpoint)
    finally:
        try:
            if callable(set_workload):
                set_workload(None)
        finally:
            if locked is not None:
                backend.restore()
    if out_weights is not None:
        atomic_torch_save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out_weights)
    response = result.to_dict()
    response.update(
        {
            "time_s": result.train_time_s,
            "accuracy": result.final_accuracy,
            "model": name,
            "task": task,
            "device": str(device),
            "freq_mhz": locked,
            "restored": locked is not None,
            "power_measured": power_read is not None,
            "checkpoint": checkpoint,
            "out_weights": out_weights,
            "notes": notes,
            "segment_s": plan.segment_s,
            "progress": progress_record(
                {
                    "time_s": result.train_time_s,
                    "samples": result.samples,
                    "energy_j": result.energy_j,
                    "accuracy": result.final_accuracy if result.curve else None,
                    "end_batch_size": result.batch_size,
                    "end_freq_mhz": locked,
                    "done": 1.0 if result.reached else 0.0,  # no efficiency to count against
                    "eta_s": 0.0 if result.reached else None,
                    "segments": result.sessions,
                }
            ),
        }
    )
    return TrainReply(**response).to_dict()


class _Job(NamedTuple):
    """What the reply says about the job besides the trainer's numbers, and the sampler's rate."""

    name: str
    task: str
    device: str
    notes: List[str]
    checkpoint: Optional[str]
    out_weights: Optional[str]
    sampler_hz: float


def _train_closed_loop(
    ctx: Context,
    model: Any,
    train_set: Any,
    test_set: Any,
    plan: TrainPlan,
    loop_plan: LoopPlan,
    job: _Job,
) -> Dict[str, Any]:
    from fleet.agent.loop.closedloop import ClosedLoopError
    from fleet.agent.loop.segments import OBJECTIVE_KEYS
    from fleet.agent.loop.underbudget import train_under_budget
    from fleet.agent.training.checkpoint import atomic_torch_save

    try:
        result, summary = train_under_budget(
            ctx.backend, model, train_set, test_set, plan, loop_plan, device=job.device,
            checkpoint_path=job.checkpoint, log=lambda m: log.warning("%s", m),
            hooks=TrainHooks(sampler_hz=job.sampler_hz, progress=_progress_to(ctx)),
        )  # fmt: skip
    except ClosedLoopError as exc:
        raise ProtocolError(str(exc)) from None
    if job.out_weights is not None:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        atomic_torch_save(state, job.out_weights)
    response = result.to_dict()
    # the trainer's batch and lr are the reference pair here: named so (lr_ref_batch, lr_ref)
    del response["batch_size"]
    response["lr_ref"] = response.pop("lr")
    started = (s for s in summary["segments"] if s.get("batch_size") is not None)
    start = next(started, {})  # type: Dict[str, Any]
    response.update(
        {
            "status": summary["status"],
            "time_s": result.train_time_s,
            "accuracy": result.final_accuracy,
            "model": job.name,
            "task": job.task,
            "device": job.device,
            "lr_ref_batch": plan.batch_size,
            "start_batch_size": start.get("batch_size"),
            "start_freq_mhz": start.get("freq_mhz"),
            "end_batch_size": summary["batch_size"] or None,
            "end_freq_mhz": summary["freq_mhz"] or None,
            "restored": True,
            "power_measured": summary["power_samples"] > 0,
            "checkpoint": job.checkpoint,
            "out_weights": job.out_weights,
            "segments": summary["segments"],
            "guard_events": summary["guard_events"],
            "drift_events": summary["drift_events"],
            "refreshes": summary["refreshes"],
            "refreshed_profile": summary["refreshed_profile"],
            "refreshed_profile_csv": summary["refreshed_profile_csv"]
            if summary["refreshes"]
            else None,
            "loop_time_s": summary["time_s"],
            "call_time_s": summary["call_time_s"],
            "segment_s": plan.segment_s,
            "progress": progress_record(_end_named(summary["progress"])),
            "loop_energy_j": summary["energy_j"],
            "loop_peak_power_w": summary["peak_power_w"],
            "power_window_s": summary["power_window_s"],
            "over_budget_s": summary["over_budget_s"],
            "over_budget_j": summary["over_budget_j"],
            "over_budget_excursions": summary["over_budget_excursions"],
            "longest_over_budget_s": summary["longest_over_budget_s"],
            "stop_reason": summary["stop_reason"],
            "learning": summary["learning"],
            **{k: summary[k] for k in OBJECTIVE_KEYS},
            "notes": job.notes + summary["notes"],
        }
    )
    return TrainReply(**response).to_dict()


def reference_pair(request: TrainRequest, closed_loop: bool) -> Tuple[int, float]:
    """(batch, lr): the fixed run's own pair, or the closed loop's learning-rate reference
    (``lr_ref_batch``/``lr_ref``) that the batch it chooses scales from. Each name means one
    thing, so the other pair is refused, naming the right one."""
    mine, other = ("lr_ref_batch", "lr_ref"), ("batch_size", "lr")
    if not closed_loop:
        mine, other = other, mine
    for key, right in zip(other, mine):
        if getattr(request, key) is not None:
            what = "a closed-loop train (a budget)" if closed_loop else "a fixed-point train"
            raise ProtocolError("{} takes '{}', not '{}'".format(what, right, key))
    for key in mine:
        if getattr(request, key) is None:
            raise ProtocolError("train needs '{}'".format(key))
    return int(getattr(request, mine[0])), float(getattr(request, mine[1]))


def _end_named(progress: Dict[str, Any]) -> Dict[str, Any]:
    """The closed loop's progress with the running point under the record's names (the loop
    calls it batch_size/freq_mhz; the record, like the row, says end_*)."""
    out = dict(progress)
    out["end_batch_size"] = out.pop("batch_size", None)
    out["end_freq_mhz"] = out.pop("freq_mhz", None)
    return out


def _progress_to(ctx: Context) -> ProgressFn:
    """The trainer's progress callback, as the protocol's progress events."""

    def progress(done: int, total: int, info: Dict[str, Any]) -> None:
        ctx.progress(done, total, **info)

    return progress


def progress_record(values: Dict[str, Any]) -> Dict[str, Any]:
    """A ``Progress`` as it travels: an unknown counter (None) of a field that is never null
    takes the record's default (no power reading: no energy counted)."""
    never_null = set(f.name for f in Progress.FIELDS if not f.null)
    kept = dict((k, v) for k, v in values.items() if v is not None or k not in never_null)
    return Progress(**kept).to_dict()
