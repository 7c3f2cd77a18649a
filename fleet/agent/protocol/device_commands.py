"""The agent's device commands: ``profile``, ``lock``, ``restore``, ``power`` and ``shutdown``.

Why separate: each is a short handler that checks its request and calls the backend (or the
profiler); they share nothing with serving the channel (``protocol.py``) or with the much
larger ``train`` command (``train_command.py``). A handler raises to fail; the dispatcher turns
the exception into a one-line error response. Python 3.6 compatible.
"""

import time
from typing import Any, Dict, List, Optional  # noqa: F401 - List in type comments

from fleet.agent.protocol.handler_api import Context, number, number_list, request_of, torch_device
from fleet.agent.protocol.wire import ProtocolError
from fleet.method.agent_records import BareRequest, LockRequest, ProfileRequest


def handle_profile(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Profile a model (paper §4.1); returns the rows and, with "out", writes the CSV there.

    ``"rows": false`` leaves the rows out of the response (the CSV is enough for big grids).
    ``"device"`` is the torch device; by default CUDA on GPU backends, the CPU otherwise.
    """
    from fleet.agent.measure.profile_writer import write_profile
    from fleet.agent.measure.profiler import profile_grid
    from fleet.agent.measure.sweep_plan import DEFAULT_BATCH_SIZES, PredictPlan, SweepPlan

    request_of(req, ProfileRequest)
    model = req.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError("profile needs 'model' (a model name)")
    batch_sizes = number_list(req, "batch_sizes", list(DEFAULT_BATCH_SIZES))
    if any(b != int(b) for b in batch_sizes):
        raise ProtocolError("'batch_sizes' must be integers, got {}".format(batch_sizes))
    notes = []  # type: List[str]
    device = torch_device(ctx, req, notes)  # like train: no CUDA in torch -> the CPU, noted
    out = req.get("out")
    if out is not None and (not isinstance(out, str) or not out):
        raise ProtocolError("'out' must be a file path")

    def progress(done: int, total: int, row: Optional[Dict[str, Any]]) -> None:
        ctx.progress(done, total)

    plan = SweepPlan(
        model,
        input_shape=req.get("input_shape"),
        batch_sizes=[int(b) for b in batch_sizes],
        freqs=number_list(req, "freqs"),
        steps=int(number(req, "steps", 5)),
        warmup=int(number(req, "warmup", 2)),
        budget_w=None if req.get("budget_w") is None else _budget(req["budget_w"], "budget_w"),
        sampler_hz=float(number(req, "sampler_hz", 20.0)),
        num_classes=number(req, "num_classes"),
    )
    predict = None
    if req.get("predict", False):  # probe a design, predict the rest
        predict = PredictPlan(
            max_probes=None if req.get("max_probes") is None else int(number(req, "max_probes")),
            adapt_budgets=_budgets(req.get("adapt_budgets")),
            adapt_efficiency=_efficiency(req.get("adapt_efficiency")),
            adapt_probes=None
            if req.get("adapt_probes") is None
            else int(number(req, "adapt_probes")),
        )
    result = profile_grid(ctx.backend, plan, predict, device=str(device), progress=progress)
    if out:
        write_profile(out, result.rows, result.metadata)
    response = {
        "probes": result.probes,
        "grid_size": result.grid_size,
        "saved": result.grid_size - result.probes,
        "path": out,
        "metadata": result.metadata,
        "notes": notes,
    }  # type: Dict[str, Any]
    if req.get("rows", True):
        response["rows"] = result.rows
    return response


def _budget(raw: Any, where: str) -> Optional[float]:
    """One budget of a request, read by the kernel's grammar (``fleet.method.budget``)."""
    from fleet.method.budget import BudgetError, parse_budget

    try:
        return parse_budget(raw, where)
    except BudgetError as exc:
        raise ProtocolError(str(exc)) from None


def _budgets(raw: Any) -> Optional[List[Optional[float]]]:
    """'adapt_budgets': a list of budgets (the device's budget steps), null meaning no limit."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        raise ProtocolError("'adapt_budgets' must be a non-empty list of watts (null: no limit)")
    return [None if item is None else _budget(item, "adapt_budgets") for item in raw]


def _efficiency(raw: Any) -> Optional[Dict[int, float]]:
    """'adapt_efficiency': samples to accuracy per batch size (the shipped efficiency)."""
    from fleet.method.selection import ChooseError, efficiency_from

    if raw is None:
        return None
    try:
        return efficiency_from(raw, "'adapt_efficiency'")
    except ChooseError as exc:
        raise ProtocolError(str(exc)) from None


def handle_lock(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Pin the GPU at one of the backend's frequencies (``"freq_mhz"``)."""
    request_of(req, LockRequest)
    freq = float(number(req, "freq_mhz", required=True))
    ctx.backend.lock(freq)
    return {"freq_mhz": freq}


def handle_restore(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Give the device its original frequency settings back."""
    request_of(req, BareRequest)
    ctx.backend.restore()
    return {"restored": True}


def handle_power(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """One reading of the configured rail; ``power_w`` is null where power is not measurable."""
    request_of(req, BareRequest)
    value = ctx.backend.read_power_w()
    return {"power_w": value, "available": value is not None, "time": time.time()}


def handle_shutdown(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Restore the device and stop serving after this response."""
    request_of(req, BareRequest)
    ctx.backend.restore()
    ctx.stopping = True
    return {"restored": True}
