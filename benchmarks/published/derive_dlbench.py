"""Derive the published DVFS grids of Tang et al. into profile CSVs (issue 30).

    python benchmarks/published/derive_dlbench.py CHECKOUT [--out benchmarks/published/dlbench_dvfs]

``CHECKOUT`` is a checkout (or ``git archive``) of ``github.com/blackjack2015/dlbench_dvfs`` at
commit 18fe93d0c00ed9f9b0686ee1f3bfdd1410eafd4e (Tang, Wang, Chu, "The impact of GPU DVFS on the
energy and performance of deep learning: an empirical study", e-Energy 2019). The grids are the
authors' measurements: Caffe time per iteration (s) and mean NVML power (W) over memory clock x
core clock. Published numbers are facts; the derived files are committed beside this script so
that the benchmark and the tests read them without the network, and this script says exactly
how each cell was made.

Mapping (the profile CSV has a batch-size axis and a knob axis; the source has none of batch):
- ``batch_size`` holds the memory clock in MHz (a header line ``# axes: batch_size holds the
  memory clock`` tells ``benchmarks/predict_eval.fixed_batch`` that every step does the same
  work), ``freq_mhz`` the core clock in MHz;
- ``time_per_batch_s`` = the published time per iteration (``time/us`` / 1e6 for the
  convolutions); ``peak_power_w`` = ``mean_power_w`` = the published mean power (only the mean
  is published);
- the two Titan X grids measured at clock *offsets* (``titanX-caffe-vgg``, ``titanX-caffe-fc``)
  get clocks estimated as 1800 MHz + core offset and 5000 MHz + memory offset (the absolute
  grids of the same card and authors span core 1600-2000, memory 3500-5000 MHz);
- ``dvfs_caffe.mat``'s third network (no name in the repository) is read from its ``perf`` and
  ``power`` matrices (MATLAB v5, parsed here with the standard library).

Standard library only (Python 3.10+), so it runs anywhere the snapshot is.
"""

import argparse
import csv
import os
import struct
import sys
import zlib

SOURCE = "https://github.com/blackjack2015/dlbench_dvfs"
COMMIT = "18fe93d0c00ed9f9b0686ee1f3bfdd1410eafd4e"
PUBLICATION = (
    "Zhenheng Tang, Yuxin Wang, Qiang Wang, Xiaowen Chu, The impact of GPU DVFS on the energy "
    "and performance of deep learning: an empirical study, e-Energy 2019, "
    "doi:10.1145/3307772.3328315"
)
OFFSET_BASE = (1800, 5000)  # (core, memory) MHz the offset grids are placed at

# name -> (source file, device, network, reader, what the step is)
GRIDS = {
    "gtx1080ti_googlenet_b128": ("caffe/excels/gtx1080Ti-googlenet.csv", "GTX 1080 Ti",
                                 "googlenet", "csv", "training iteration, batch 128"),
    "titanx_googlenet_b128": ("caffe/excels/titanX-caffe-googlenet.csv", "Titan X Pascal",
                              "googlenet", "csv", "training iteration, batch 128"),
    "titanx_resnet50_b64": ("caffe/excels/titanX-caffe-resnet.csv", "Titan X Pascal",
                            "resnet50", "csv", "training iteration, batch 64"),
    "titanx_unnamed_net": ("caffe/dvfs_caffe.mat", "Titan X Pascal", "unnamed (perf/power "
                           "column 3)", "mat", "training iteration"),
    "titanx_googlenet_fwbw": ("caffe/excels/titanX-googlenet-logs-v2.csv", "Titan X Pascal",
                              "googlenet", "csv", "caffe time: forward+backward, batch 128"),
    "titanx_vgg16_fwbw": ("caffe/excels/titanX-vgg-logs-v2.csv", "Titan X Pascal", "vgg16",
                          "csv", "caffe time: forward+backward"),
    "titanx_vgg16_offsets": ("caffe/excels/titanX-caffe-vgg.csv", "Titan X Pascal", "vgg16",
                             "offset", "caffe time: forward+backward"),
    "titanx_fc_offsets": ("caffe/excels/titanX-caffe-fc.csv", "Titan X Pascal",
                          "ffn26752l6 (fully connected), batch 128", "offset",
                          "caffe time: forward+backward"),
    "gtx980_resnet": ("caffe/excels/gtx980-resnet.csv", "GTX 980", "resnet", "csv",
                      "caffe time: forward+backward"),
    "gtx980_conv_fft": ("conv/dvfs-conv.csv", "GTX 980", "conv-fft", "conv",
                        "one convolution (input00), forward"),
    "gtx980_conv_sgemm": ("conv/dvfs-conv.csv", "GTX 980", "conv-sgemm", "conv",
                          "one convolution (input00), forward"),
    "gtx980_conv_winograd": ("conv/dvfs-conv.csv", "GTX 980", "conv-winograd", "conv",
                             "one convolution (input00), forward"),
}  # fmt: skip


def _csv_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _power_col(row):
    return float(row["power/W"])


def read_csv(path, _net):
    """(memory MHz, core MHz, time s, power W) from an ``excels`` table."""
    return [
        (int(r["memF"]), int(r["coreF"]), float(r["time/s"]), _power_col(r))
        for r in _csv_rows(path)
    ]


def read_offset(path, _net):
    core0, mem0 = OFFSET_BASE
    return [
        (mem0 + int(r["memF"]), core0 + int(r["coreF"]), float(r["time/s"]), _power_col(r))
        for r in _csv_rows(path)
    ]


def read_conv(path, net):
    return [
        (int(r["memF"]), int(r["coreF"]), float(r["time/us"]) / 1e6, _power_col(r))
        for r in _csv_rows(path)
        if r["appName"] == net
    ]


def read_mat(path, _net):
    """Column 3 of ``perf`` and ``power`` (columns: core, memory, net, googlenet, resnet)."""
    mats = load_mat(path)
    perf, power = mats["perf"], mats["power"]
    out = []
    for p, w in zip(perf, power, strict=True):
        if (p[0], p[1]) != (w[0], w[1]):
            raise ValueError(f"{path}: perf and power rows disagree on clocks")
        out.append((int(p[1]), int(p[0]), p[2], w[2]))
    return out


READERS = {"csv": read_csv, "offset": read_offset, "conv": read_conv, "mat": read_mat}


def _elements(buf):
    i = 0
    while i + 8 <= len(buf):
        kind, size = struct.unpack_from("<II", buf, i)
        if kind >> 16:  # small data element: size in the upper half, data in the next 4 bytes
            yield kind & 0xFFFF, buf[i + 4 : i + 4 + (kind >> 16)]
            i += 8
            continue
        yield kind, buf[i + 8 : i + 8 + size]
        i += 8 + size + (0 if kind == 15 else (-size) % 8)


def load_mat(path):
    """Real double matrices of a MATLAB v5 file, as lists of rows (enough for these files)."""
    with open(path, "rb") as fh:
        buf = fh.read()[128:]
    out = {}
    for kind, body in _elements(buf):
        if kind == 15:  # miCOMPRESSED
            kind, body = next(_elements(zlib.decompress(body)))
        if kind != 14:  # miMATRIX
            continue
        parts = list(_elements(body))
        flags, dims, name = parts[0][1], parts[1][1], parts[2][1].decode()
        if flags[0] != 6 or parts[3][0] != 9:  # double class, miDOUBLE data
            continue
        nrow, ncol = struct.unpack_from("<ii", dims)
        flat = struct.unpack(f"<{nrow * ncol}d", parts[3][1])
        out[name] = [[flat[c * nrow + r] for c in range(ncol)] for r in range(nrow)]
    return out


def derive(checkout, name):
    src, device, net, reader, step = GRIDS[name]
    cells = READERS[reader](os.path.join(checkout, src), net)
    seen = set()
    for mem, core, _t, _p in cells:
        if (mem, core) in seen:
            raise ValueError(f"{src}: clock pair {mem} {core} twice")
        seen.add((mem, core))
    comments = [
        f"source: {SOURCE} @ {COMMIT} ({src})",
        f"commit: {COMMIT}",
        f"publication: {PUBLICATION}",
        "licence: none stated; published measurements are facts",
        "derived by: benchmarks/published/derive_dlbench.py",
        f"device: {device}; network: {net}; step: {step}",
        "axes: batch_size holds the memory clock (MHz); freq_mhz the core clock (MHz)",
        "power: only mean NVML power is published; peak_power_w = mean_power_w = it",
    ]
    if reader == "offset":
        comments.append(
            "clocks: estimated as core {} MHz + coreF offset, memory {} MHz + memF offset "
            "(the source gives offsets)".format(*OFFSET_BASE)
        )
    rows = [
        {
            "batch_size": mem,
            "freq_mhz": core,
            "time_per_batch_s": f"{t:.9g}",
            "peak_power_w": f"{p:.7g}",
            "mean_power_w": f"{p:.7g}",
            "device": device.replace(" ", "_"),
            "model": net.split(" ")[0],
            "status": "ok",
        }
        for mem, core, t, p in sorted(cells)
    ]
    return comments, rows


def write(path, comments, rows):
    with open(path, "w", newline="") as fh:
        for c in comments:
            fh.write(f"# {c}\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", help="dlbench_dvfs checkout at " + COMMIT[:7])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "dlbench_dvfs"))
    args = ap.parse_args(argv)
    files = [g[0] for g in GRIDS.values()]
    missing = [f for f in files if not os.path.isfile(os.path.join(args.checkout, f))]
    if missing:
        where = f"a checkout of {SOURCE} @ {COMMIT[:7]}?"
        print(f"{args.checkout}: missing {missing[0]} ({where})", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for name in GRIDS:
        comments, rows = derive(args.checkout, name)
        write(os.path.join(args.out, name + ".csv"), comments, rows)
        print(f"{name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
