"""A fleet's devices checked before its first step: what a replayed device needs is readable.

Why here and up front: a round keeps going without a device that cannot serve it (its row says
``error``, ``device_round``), which is right for a board that breaks mid-round, but a device
whose profile is another board type's, whose trace is not a trace, or whose batch sizes share
nothing with the shipped efficiency is a mistake in the fleet file, known before any work. A
simulation that ran around it exited 0 with ``error`` in a row; a what-if sweep counted it among
the devices that did not train and answered another fleet's question at every step. Both now
stop here, with one line naming the device and the file (docs/architecture.md, `fleet/rounds/`).
"""

from __future__ import annotations

from fleet.common.errors import InputError
from fleet.config.fleetfile import Fleet
from fleet.core.choice import align
from fleet.rounds.device_round import check_device_type, model_note
from fleet.rounds.virtual_clock import cached_efficiency, cached_profile, device_curves


def check_devices(fleet: Fleet, every_device_replayed: bool = True) -> list[str]:
    """Every device's profile read and of its type, sharing batch sizes with the shipped
    efficiency, and its convergence trace (with its learning curves when the fleet learns) read
    where it replays one (``learning = "trace"``). A hardware device (``client = "hardware"``:
    its profile and data may be paths on the board) is passed over unless
    ``every_device_replayed`` (a sweep replays every device here: it then needs a local profile
    and trace, or it would be counted among those that did not train).

    Returned: a line where the efficiency, and one per device where its profile, was recorded
    for another model than ``[run] model`` or at another ``[run] input_shape`` (said, not
    refused: ``device_round.model_note``, ``shape_note``)."""
    shipped = cached_efficiency(fleet.run.efficiency)
    seen: set[tuple] = set()
    notes = [model_note(shipped.source, shipped.metadata, fleet.run.model, "efficiency")]
    for spec in fleet.devices:
        key = (spec.profile, spec.data, spec.device_type, spec.learning, spec.client)
        if key in seen:
            continue
        seen.add(key)
        who = f"device {spec.name}: "
        if spec.client == "hardware" and not every_device_replayed:
            continue  # its files are the board's; the round says what the board met
        if not spec.profile:
            raise InputError(f"{who}no profile to replay (a hardware device's first contact)")
        if spec.data is None and spec.learning == "trace":
            raise InputError(f"{who}no convergence trace (data) here to replay")
        try:
            profile, _ = cached_profile(spec.profile)
            if spec.data is not None and spec.learning == "trace":  # with its learning curves
                device_curves(spec, cached_efficiency(spec.data), fleet.run)  # read: checked
            check_device_type(spec, profile)
            align(profile, shipped)
        except InputError as exc:
            why = str(exc)
            raise InputError(why if why.startswith(who) else who + why) from None
        for said in (
            model_note(profile.source, profile.metadata, fleet.run.model),
            shape_note(profile.source, profile.metadata, fleet.run.input_shape),
        ):
            if said:
                notes.append(who + said)
    return [n for n in notes if n]


def shape_note(source: str, metadata: dict[str, str], input_shape: str | None) -> str:
    """What is said when ``[run] input_shape`` (the shape profiles are keyed by) is not the one
    a device's profile was recorded at: its times are another input's. Said, not refused, as
    another model is (``device_round.model_note``); empty when they agree or either is unset."""
    from fleet.agent.models.inputs import parse_shape

    recorded = metadata.get("input_shape", "")
    if not input_shape or not recorded:
        return ""
    try:
        if parse_shape(recorded) == parse_shape(input_shape):
            return ""
    except ValueError:
        pass  # a recorded shape that is no shape differs from any
    return f"[run] input_shape is {input_shape} but its profile {source} was recorded at {recorded}"
