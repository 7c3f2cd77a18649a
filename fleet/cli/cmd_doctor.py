"""`powerfleet doctor`: what this machine is, what powerfleet found on it, and what can run.

Why a command: a board that fails to profile or train fails for a reason that lives in its
sysfs (a GPU node under another name, a sensor that is not there, clocks not writable, a state
file left by a crash). ``doctor`` says all of it in one place, read-only (``survey.py``), as a
table for people and one JSON object (``--json``) to paste into a bug report. It runs on a board
or on a copied tree (``--sysfs-root``). Exit 0 when the survey ran, whatever it found; 2 when
the root is not a sysfs tree or ``--rail`` names a rail that is not there (a wrong argument, said
as ``profile`` and ``train`` say it, not a finding about the board).

On a machine that is not a Jetson (a PC, a VM) the Jetson survey can only say "no"; doctor then
says what the machine is (an NVIDIA GPU or not, RAPL counters or not: ``machine.py``) and what
runs here, with the exact commands (``can_run``: the nvml/cpu backends, the simulation, a
virtual board rehearsal). ``--json`` keeps every key and adds ``machine`` and ``can_run``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from fleet.agent.devices.survey import exists, survey
from fleet.cli.common import emit_json, fmt, mhz
from fleet.common.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="what this machine is and what can run on it (profile, train, a rehearsal)"
    )
    p.add_argument("--sysfs-root", default="/", help="sysfs prefix (a copied tree, a dry run)")
    p.add_argument("--state-dir", help="where clock state is saved (default: as `restore`)")
    p.add_argument("--rail", help="power rail or sum A+B to report (default: the board's total)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not exists(args.sysfs_root):
        raise InputError(f"--sysfs-root {args.sysfs_root}: no sys/ directory there to survey")
    report = survey(args.sysfs_root, args.state_dir, args.rail)
    power = report.get("power") or {}
    if args.rail and power.get("error") and "rails" not in power:
        raise InputError(f"--rail {args.rail}: {power['error']}")
    if args.json:
        emit_json(report)
    else:
        show(report)
    return 0


def show(report: dict[str, Any]) -> None:
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=True)  # a long path is one line, not folded
    if report.get("machine", {}).get("kind") == "pc":
        show_pc(out, report)
        return
    b = report["board"]
    name = b["name"] or "unknown (not in the board table)"
    out.print(f"[bold]Board[/bold]  {name}  type {b['type'] or '-'}  model {b['model'] or '-'}")
    out.print(
        f"  L4T {b['l4t'] or '-'}  JetPack {b['jetpack'] or '-'}  devfreq rules {b['kernel_rules']}"
    )
    out.print(f"  compatible {', '.join(b['compatible']) or '-'}")
    if b.get("source") == "virtual":
        out.print(
            f"  [bold]virtual board[/bold] ({b.get('virtual_board')}) on host {b.get('host')}: "
            "its times are the host's, not the board's; profiles and runs say source=virtual"
        )
    gpu = report["gpu"]
    out.print("[bold]GPU[/bold]" + (f"  {gpu['error']}" if gpu.get("error") else ""))
    for n in gpu.get("nodes", []):
        table = n.get("available_mhz") or []
        out.print(
            f"  {n['name']}: min {mhz(n.get('min_mhz'))} max {mhz(n.get('max_mhz'))} "
            f"cur {mhz(n.get('cur_mhz'))} MHz, governor {n.get('governor') or '-'}, "
            + (
                f"{'/'.join(n['missing'])} missing"
                if n.get("missing")
                else ("writable" if n.get("writable") else "NOT writable")
            )
            + (", max below the table's top" if n.get("below_table_top") else "")
        )
        out.print(f"    clocks (MHz): {' '.join(mhz(f) for f in table) or '-'}")
    if gpu.get("table_vs_board"):
        out.print(f"  clock table vs the board table: {gpu['table_vs_board']}")
    p = report["power"]
    out.print("[bold]Power[/bold]")
    if p.get("error"):
        out.print(f"  {p['error']}")
    elif p.get("reason"):
        out.print(f"  none: {p['reason']}")
    else:
        out.print(
            f"  total {fmt(p.get('total_w'))} W = {p.get('rail')} ({p.get('power_total')}); "
            f"sensors {p.get('power_sensors')}; refresh "
            f"{fmt(p.get('sensor_period_s'))} s"
        )
        for r in p.get("rails", []):
            mark = "+" if r["in_total"] else " "
            value = fmt(r.get("watts")) if "watts" in r else r.get("error")
            out.print(f"   {mark} {r['name']}: {value} W")
    s = report["clock_state"]
    saved = "error: " + s["error"] if s.get("error") else ("saved" if s.get("saved") else "none")
    out.print(f"[bold]Clock state[/bold]  {s['file']}: {saved}")
    if s.get("saved"):
        out.print(f"  written by pid {s.get('pid')} ({s.get('writer')})")
    r = report["ready"]
    # a reason already printed under GPU or Power is pointed to, not said again
    said = {gpu.get("error"): "no usable GPU node (GPU above)"}
    said[p.get("error") or p.get("reason")] = "no power reading (Power above)"
    for what in ("profile", "train"):
        why = [said.get(w, w) for w in r[f"why_not_{what}"]]
        verdict = "[green]yes[/green]" if r[what] else "[red]no[/red]: " + "; ".join(why)
        out.print(f"[bold]{what}[/bold] {verdict}")
    for note in r["notes"]:
        out.print(f"  note: {note}")


def show_pc(out: Any, report: dict[str, Any]) -> None:
    """Not a Jetson: what the machine is and what runs here, each thing said once."""
    m = report["machine"]
    out.print(f"[bold]Machine[/bold]  {m['summary']}")
    gpu = m["nvidia_gpu"]
    if gpu["present"] and not gpu["nvml"] and gpu.get("nvml_error"):
        out.print(f"  NVML: {gpu['nvml_error']}")
    out.print(
        "[bold]Jetson[/bold]  no Jetson GPU devfreq node under "
        f"{os.path.join(report['sysfs_root'], 'sys/class/devfreq')}: the jetson backend "
        "(`profile`, `train` on a board) needs a board or a board's tree (--sysfs-root)"
    )
    s = report["clock_state"]
    if s.get("saved") or s.get("error"):
        saved = "error: " + s["error"] if s.get("error") else "saved"
        out.print(f"[bold]Clock state[/bold]  {s['file']}: {saved}")
    out.print("[bold]What runs here[/bold]")
    for item in report["can_run"]:
        out.print(f"  {item['what']}:")
        for line in item["command"].splitlines():
            out.print(f"    {line}")
